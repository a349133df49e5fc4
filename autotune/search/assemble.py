"""Turn DP solutions (and interleaved layouts) of a slice into Plans."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from autotune.plan.plan import Plan, StagePlan
from autotune.search.cuts import dp_inputs, solve_cuts
from autotune.search.inter_op import FIRST, LAST, MIDDLE, SINGLE
from autotune.search.intra_op import IntraOpResult
from autotune.spec.workload import is_training

__all__ = ["build_plans"]


def _position(first: int, n: int, num_layers: int) -> int:
    end = first + n
    if first == 0:
        return SINGLE if end == num_layers else FIRST
    return LAST if end == num_layers else MIDDLE


def _stage(result: IntraOpResult, choice_index: int, dp: int, first: int, n: int, num_layers: int) -> StagePlan:
    choice = result.choice(choice_index)
    return choice.stage_plan(dp=dp, layers=(first, first + n), has_embedding=first == 0,
                             has_head=first + n == num_layers)


def _plan(search, key, stages: list[StagePlan], schedule: str = "1f1b", vpp: int = 1) -> Plan:
    num_mb = search.problem.workload.global_batch // (key.dp * key.micro_batch)
    runtime, training = search.problem.runtime, search.problem.workload.kind == "train"
    return Plan(gpus=search.problem.gpus, micro_batch=key.micro_batch, num_microbatches=num_mb,
                stages=tuple(stages), schedule=schedule, vpp=vpp,
                overlap_tp_comm=search.problem.space.overlap_tp_comm and training,
                overlap_tp_backward=runtime.overlap_tp_backward, overlap_grad_reduce=runtime.overlap_grad_reduce,
                overlap_param_gather=runtime.overlap_param_gather, overlap_p2p_comm=runtime.overlap_p2p_comm)


def _from_solution(search, key, group: list[IntraOpResult], solution, index: np.ndarray) -> Plan:
    num_layers = search.problem.model.num_layers
    stages = []
    for cut in solution.stages:
        pos = _position(cut.first_layer, cut.num_layers, num_layers)
        choice_index = int(index[cut.submesh, cut.num_layers, pos, cut.inflight])
        stages.append(_stage(group[cut.submesh], choice_index, key.dp, cut.first_layer, cut.num_layers, num_layers))
    return _plan(search, key, stages)


def _interleaved(search, key) -> Iterator[Plan]:
    """Equal stages of equal layer counts with vpp model chunks per rank (Megatron's layout)."""

    num_layers = search.problem.model.num_layers
    num_mb = search.problem.workload.global_batch // (key.dp * key.micro_batch)
    for result in search.results(key.dp):
        stages, spare = divmod(search.problem.gpus, key.dp * result.model_parallel)
        if spare or stages < 2 or num_layers % stages or num_mb % stages:  # equal stages must use every GPU
            continue
        n = num_layers // stages
        vpps = [v for v in search.problem.space.vpp if v > 1 and n % v == 0]
        if not vpps:
            continue
        r = min(num_mb, stages, search.problem.space.max_stages)
        _, _, index, _ = dp_inputs(search, key, [result], r)
        picks = [int(index[0, n, _position(i * n, n, num_layers), r]) for i in range(stages)]
        if min(picks) < 0:
            continue
        if search.problem.space.uniform_stages:  # every stage takes the first stage's choice
            picks = [picks[0]] * stages
        stage_plans = [_stage(result, picks[i], key.dp, i * n, n, num_layers) for i in range(stages)]
        for vpp in vpps:
            yield _plan(search, key, stage_plans, schedule="interleaved", vpp=vpp)


def build_plans(search, key, prune_above: float = float("inf")) -> Iterator[Plan]:
    """Candidate plans of one slice: the DP's cuts (1F1B) and interleaved layouts."""

    for group, solution, index in solve_cuts(search, key, prune_above):
        yield _from_solution(search, key, group, solution, index)
    if is_training(search.problem.workload):
        yield from _interleaved(search, key)
