"""Cost tables of stage choices: every layer count, pipeline position and micro-batch at once.

A stage's cost depends on its layer count n, whether it holds the embedding and/or the head
(its position: first, middle, last, or the only stage), its submesh and its choice; transformer
layers repeat, so one call of the cost model per (choice, position) covers every n and every
micro-batch size (the seed survey's closing note: prune and reuse across repeated layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.cost.contract import StageCostModel, phase_cost_models
from autotune.cost.stage import StagePosition
from autotune.errors import AutotuneError
from autotune.graph.table import ModelTables
from autotune.search.choices import StageChoice
from autotune.spec.hardware import ClusterSpec

__all__ = ["POSITIONS", "ChoiceCosts", "SliceContext", "choice_costs", "best_by_inflight"]

# (has_embedding, has_head, neighbours) of each position index
POSITIONS = ((False, False, 2), (True, False, 1), (False, True, 1), (True, True, 0))
MIDDLE, FIRST, LAST, SINGLE = range(4)


@dataclass(frozen=True, kw_only=True, eq=False)
class SliceContext:
    """What is fixed while one data-parallel degree's stage choices are scored."""

    tables: ModelTables
    workload: object
    cluster: ClusterSpec
    dp: int
    micro_batches: tuple[int, ...]
    gpus: int
    overlap_tp_comm: bool = False

    @property
    def num_microbatches(self) -> np.ndarray:
        return np.array([self.workload.global_batch // (self.dp * b) for b in self.micro_batches])[:, None]


@dataclass(frozen=True, kw_only=True, eq=False)
class ChoiceCosts:
    """Arrays indexed [micro-batch index, layer count n (0 unused), position]."""

    choice: StageChoice
    time_s: np.ndarray  # per micro-batch
    tail_s: np.ndarray  # per step: exposed gradient sync + optimizer
    mem_base_bytes: np.ndarray  # peak with no micro-batch in flight
    mem_per_microbatch_bytes: np.ndarray


def positions_needed(ctx: SliceContext, stage_gpus: int) -> list[int]:
    """Positions a stage of ``stage_gpus`` GPUs can take: the only stage when it has them all,
    else first and last, and middle when three stages fit."""
    if stage_gpus >= ctx.gpus:
        return [SINGLE]
    if ctx.gpus % stage_gpus:  # unequal submeshes (2 + 1 of 3 GPUs): a middle stage needs two others
        return [FIRST, LAST] + ([MIDDLE] if ctx.gpus - stage_gpus >= 2 * ctx.dp else [])
    stages = ctx.gpus // stage_gpus
    return [FIRST, LAST] + ([MIDDLE] if stages >= 3 else [])


def _phase_costers(ctx: SliceContext) -> list[tuple[float, StageCostModel]]:
    """(weight, cost model) per phase of the workload (autotune.cost.contract)."""
    return phase_cost_models(ctx.tables, ctx.workload, ctx.cluster, micro_batch=np.array(ctx.micro_batches)[:, None],
                             num_microbatches=ctx.num_microbatches, overlap_tp_comm=ctx.overlap_tp_comm)


# A stage's HBM is affine in the micro-batches it holds (offload staging buffers add a constant),
# so it is scored with none and with one in flight at once (a leading axis of two).
_NONE_AND_ONE = np.array([0.0, 1.0]).reshape(2, 1, 1)


def _at_one(x) -> np.ndarray:
    x = np.asarray(x)
    return x[1] if x.ndim == 3 else x


def _stage_arrays(costers, stage, pos: StagePosition, n: np.ndarray) -> tuple[np.ndarray, ...]:
    """Weighted time, tail, HBM without and per in-flight micro-batch, over the phases."""
    time = tail = base = per = 0.0
    both = StagePosition(inflight=_NONE_AND_ONE, neighbors=pos.neighbors, p2p_inter_node=pos.p2p_inter_node)
    for weight, model in costers:
        cost = model.stage_cost(stage, both, num_layers=n)
        time = time + weight * _at_one(cost.time.microbatch_s)
        tail = tail + weight * _at_one(cost.time.step_tail_s)
        peak = np.broadcast_to(cost.memory.peak_bytes, (2,) + np.shape(_at_one(cost.time.microbatch_s)))
        base = np.maximum(base, peak[0])
        per = np.maximum(per, peak[1] - peak[0])
    return time, tail, base, per


def choice_costs(ctx: SliceContext, choice: StageChoice) -> ChoiceCosts:
    """Score ``choice`` for every micro-batch size, layer count and position."""
    num_layers = ctx.tables.model.num_layers
    n = np.arange(1, num_layers + 1)[None, :]
    costers = _phase_costers(ctx)
    size = choice.tp * choice.cp * ctx.dp
    inter = size >= ctx.cluster.gpus_per_node
    shape = (len(ctx.micro_batches), num_layers + 1, len(POSITIONS))
    arrays = {k: np.full(shape, np.inf) for k in ("time", "tail", "base", "per")}
    for index in positions_needed(ctx, size):
        emb, head, neighbors = POSITIONS[index]
        pos = StagePosition(inflight=1.0, neighbors=neighbors, p2p_inter_node=inter)
        try:  # a choice this stage cannot take (a cache group that does not fit, ep x etp not dividing it)
            stage = choice.stage_plan(dp=ctx.dp, has_embedding=emb, has_head=head)
            values = _stage_arrays(costers, stage, pos, n)
        except AutotuneError:
            continue
        for key, value in zip(("time", "tail", "base", "per"), values):
            arrays[key][:, 1:, index] = value
    return ChoiceCosts(choice=choice, time_s=arrays["time"], tail_s=arrays["tail"],
                       mem_base_bytes=arrays["base"], mem_per_microbatch_bytes=arrays["per"])


def best_by_inflight(costs: list[ChoiceCosts], b_index: int, num_microbatches: int, max_inflight: int,
                     capacity_bytes: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every (n, position, in-flight r = 1..max_inflight): the fitting choice that minimises
    its step contribution B * time + tail. Returns (time, tail, choice index), indexed
    [n, position, r] (r = 0 unused); inf / -1 where nothing fits."""
    time = np.stack([c.time_s[b_index] for c in costs])  # (C, n, pos)
    tail = np.stack([c.tail_s[b_index] for c in costs])
    base = np.stack([c.mem_base_bytes[b_index] for c in costs])
    per = np.stack([c.mem_per_microbatch_bytes[b_index] for c in costs])
    r = np.arange(max_inflight + 1, dtype=float)[:, None, None, None]  # (R, 1, 1, 1)
    with np.errstate(invalid="ignore"):  # inf * 0 at n = 0, which never fits anyway
        fits = base[None] + r * per[None] <= capacity_bytes  # (R, C, n, pos)
    score = np.where(fits, num_microbatches * time[None] + tail[None], np.inf)
    best = np.argmin(score, axis=1)  # (R, n, pos)
    ok = np.isfinite(np.take_along_axis(score, best[:, None], axis=1)[:, 0])
    pick = lambda a: np.where(ok, np.take_along_axis(np.broadcast_to(a[None], score.shape), best[:, None], axis=1)[:, 0], np.inf)  # noqa: E731
    best_time, best_tail = pick(time), pick(tail)
    index = np.where(ok, best, -1)
    order = (1, 2, 0)  # -> [n, pos, r]
    return best_time.transpose(order), best_tail.transpose(order), index.transpose(order)
