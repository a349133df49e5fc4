"""The two-level search: intra-op studies per (stage size, dp), then the stage DP per slice.

A slice is one (data-parallel degree, micro-batch) pair: every stage of its plans shares them.
For each slice the DP cuts the layers into stages on submeshes using the stage tables the
intra-op level produced; interleaved pipelines (vpp > 1) are scored as equal stages. The best
plan of every slice is re-scored with the full cost model (autotune.cost.evaluate).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.graph.table import model_tables
from autotune.plan.plan import Plan
from autotune.search.choices import choice_values, enumerate_choices, valid_stage_sizes
from autotune.search.inter_op import PipelineSolution, solve_pipeline
from autotune.search.intra_op import IntraOpResult, optimize_stage
from autotune.search.space import SearchSpace
from autotune.search.tables import SliceContext, best_by_inflight, choice_costs
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

__all__ = ["SearchProblem", "SliceKey", "SliceOutcome", "SliceSearch", "plan_slices"]


@dataclass(frozen=True, kw_only=True)
class SearchProblem:
    model: ModelSpec
    workload: object
    cluster: ClusterSpec
    gpus: int
    space: SearchSpace
    seed: int = 0
    method: str = "optuna"  # or "exhaustive"


@dataclass(frozen=True, order=True)
class SliceKey:
    dp: int
    micro_batch: int


@dataclass(frozen=True, kw_only=True)
class SliceOutcome:
    key: SliceKey
    plan: Plan | None
    estimate: Estimate | None
    lower_bound_s: float
    pruned: bool = False

    @property
    def step_time_s(self) -> float:
        if self.estimate is None or not self.estimate.fits:
            return math.inf
        return self.estimate.step_time_s


def plan_slices(problem: SearchProblem) -> list[SliceKey]:
    """Every (dp, micro-batch) pair the GPU count, the batch and the space allow."""
    keys = []
    for dp in range(1, problem.gpus + 1):
        if problem.gpus % dp or problem.workload.global_batch % dp:
            continue
        per_replica = problem.workload.global_batch // dp
        keys += [SliceKey(dp, b) for b in problem.space.micro_batch if per_replica % b == 0]
    return keys


@dataclass
class SliceSearch:
    """Runs slices; intra-op studies are shared by the slices of one dp and kept between calls."""

    problem: SearchProblem
    studies: dict[tuple[int, int], IntraOpResult] = field(default_factory=dict)
    num_trials: int = 0

    def __post_init__(self) -> None:
        w = self.problem.workload
        self.tables = model_tables(self.problem.model, w.seq_len, w.activation_bytes, w.attention_impl)
        self.capacity = self.problem.cluster.device.memory_bytes

    def micro_batches(self, dp: int) -> tuple[int, ...]:
        per_replica = self.problem.workload.global_batch // dp
        return tuple(b for b in self.problem.space.micro_batch if per_replica % b == 0)

    def stage_sizes(self, dp: int) -> list[int]:
        return [m for m in (s // dp for s in valid_stage_sizes(self.problem.gpus, self.problem.cluster.gpus_per_node)
                            if s % dp == 0) if m >= 1]

    def study(self, dp: int, model_parallel: int) -> IntraOpResult | None:
        key = (dp, model_parallel)
        if key not in self.studies:
            self.studies[key] = self._run_study(dp, model_parallel)
        return self.studies[key]

    def _run_study(self, dp: int, model_parallel: int) -> IntraOpResult | None:
        p = self.problem
        ctx = SliceContext(tables=self.tables, workload=p.workload, cluster=p.cluster, dp=dp,
                           micro_batches=self.micro_batches(dp), gpus=p.gpus, overlap_tp_comm=p.space.overlap_tp_comm)
        values = choice_values(p.space, p.model, p.workload.seq_len, p.cluster, model_parallel, dp)
        if not values:
            return None
        if p.method == "exhaustive":
            choices = enumerate_choices(p.space, p.model, p.workload.seq_len, p.cluster, model_parallel, dp)
            costs = tuple(choice_costs(ctx, c) for c in choices)
            self.num_trials += len(costs)
            return IntraOpResult(model_parallel=model_parallel, dp=dp, costs=costs, num_trials=len(costs))
        result = optimize_stage(ctx, p.space, values, model_parallel, seed=p.seed + 1000 * dp + model_parallel)
        self.num_trials += result.num_trials
        return result

    def results(self, dp: int) -> list[IntraOpResult]:
        return [r for m in self.stage_sizes(dp) if (r := self.study(dp, m)) is not None]

    def lower_bound_s(self, key: SliceKey) -> float:
        """No plan of the slice is faster: a stage of n layers on m units takes at least
        n * a_m, a_m the least per-layer time of a fitting choice holding one micro-batch, so
        max_i t_i >= sum_i n_i a_m m_i / U >= L min_m(a_m m) / U, and the step >= B max_i t_i."""
        units = self.problem.gpus // key.dp
        num_mb = self.problem.workload.global_batch // (key.dp * key.micro_batch)
        per_layer = [self.least_layer_time_s(key, r) * r.model_parallel for r in self.results(key.dp)]
        return num_mb * min(per_layer, default=math.inf) * self.problem.model.num_layers / units

    def least_layer_time_s(self, key: SliceKey, result: IntraOpResult) -> float:
        """min over n and positions of t(n layers, one micro-batch in flight) / n: the middle
        position (no embedding or head) where a stage size has one, else the others."""
        time, _, _, _ = dp_inputs(self, key, [result], 1)
        n = np.arange(time.shape[1])
        with np.errstate(divide="ignore", invalid="ignore"):
            per = time[0, 1:, :, 1] / n[1:, None]
        return float(np.min(per)) if per.size else math.inf

    def iter_outcomes(self, keys: list[SliceKey], prune_above: Callable[[], float]) -> Iterator[SliceOutcome]:
        """Solve slices in order of their lower bounds, skipping those that cannot win."""
        bounds = sorted((self.lower_bound_s(k), k) for k in keys)
        for bound, key in bounds:
            if bound >= prune_above():
                yield SliceOutcome(key=key, plan=None, estimate=None, lower_bound_s=bound, pruned=True)
                continue
            plan, estimate = self.solve_slice(key, prune_above())
            yield SliceOutcome(key=key, plan=plan, estimate=estimate, lower_bound_s=bound)

    def solve_slice(self, key: SliceKey, prune_above: float = math.inf) -> tuple[Plan | None, Estimate | None]:
        from autotune.search.assemble import build_plans

        best: tuple[Plan | None, Estimate | None] = (None, None)
        for plan in build_plans(self, key, prune_above):
            estimate = evaluate_plan(self.problem.model, self.problem.workload, self.problem.cluster, plan)
            if best[1] is None or _better(estimate, best[1]):
                best = (plan, estimate)
        return best


def _better(a: Estimate, b: Estimate) -> bool:
    if a.fits != b.fits:
        return a.fits
    return a.step_time_s < b.step_time_s if a.fits else a.peak_memory_bytes_per_gpu < b.peak_memory_bytes_per_gpu


def dp_inputs(search: SliceSearch, key: SliceKey, results: list[IntraOpResult], max_inflight: int):
    """Stacked stage tables of several submesh sizes for the DP: (time, tail, choice index)."""
    b_index = search.micro_batches(key.dp).index(key.micro_batch)
    num_mb = search.problem.workload.global_batch // (key.dp * key.micro_batch)
    parts = [best_by_inflight(list(r.costs), b_index, num_mb, max_inflight, search.capacity) for r in results]
    time = np.stack([p[0] for p in parts])
    tail = np.stack([p[1] for p in parts])
    index = np.stack([p[2] for p in parts])
    return time, tail, index, num_mb


def _equal_stage_bound_s(search: SliceSearch, key: SliceKey, result: IntraOpResult, num_mb: int) -> float:
    """Equal submeshes: S = U/m stages, the slowest holds at least ceil(L/S) layers."""
    stages = search.problem.gpus // (key.dp * result.model_parallel)
    layers = -(-search.problem.model.num_layers // max(stages, 1))
    time, _, _, _ = dp_inputs(search, key, [result], 1)
    return num_mb * float(np.min(time[0, layers, :, 1])) if layers < time.shape[1] else math.inf


def solve_cuts(search: SliceSearch, key: SliceKey, prune_above: float = math.inf
               ) -> list[tuple[list[IntraOpResult], PipelineSolution, np.ndarray]]:
    """DP solutions of a slice: one over all submesh sizes when the pipeline is small, else one
    per submesh size (equal stage sizes), skipping sizes whose bound cannot beat ``prune_above``."""
    results = search.results(key.dp)
    if not results:
        return []
    units = search.problem.gpus // key.dp
    space = search.problem.space
    num_mb = search.problem.workload.global_batch // (key.dp * key.micro_batch)
    max_stages = min(space.max_stages, search.problem.model.num_layers, units)
    if units <= space.max_units_for_uneven_submeshes:
        groups = [results]
    else:
        groups = [[r] for r in results if units % r.model_parallel == 0 and units // r.model_parallel <= max_stages
                  and _equal_stage_bound_s(search, key, r, num_mb) < prune_above]
    out = []
    for group in groups:
        time, tail, index, _ = dp_inputs(search, key, group, min(num_mb, max_stages))
        sizes = np.array([r.model_parallel for r in group])
        solution = solve_pipeline(time, tail, sizes, units, num_mb, max_stages)
        if solution is not None:
            out.append((group, solution, index))
    return out
