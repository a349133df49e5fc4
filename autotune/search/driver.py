"""The two-level search: stage tables per (stage size, dp), then the stage DP per slice.

A slice is one (data-parallel degree, micro-batch) pair: every stage of its plans shares them.
For each slice the DP cuts the layers into stages on submeshes using the stage tables the
intra-op level produced; interleaved pipelines (vpp > 1) are scored as equal stages. The best
plan of every slice is re-scored with the full cost model (autotune.cost.evaluate).

Spaces whose stages share one choice (the megatron, torchtitan and deepspeed spaces: what those
runtimes' configs express) are solved by bounded enumeration (autotune.search.uniform): tables
are priced only where a floor says they may win, and shared by degrees and GPU counts. Other
spaces run an intra-op study per (stage size, dp): enumerated when small, Optuna otherwise.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.graph.table import runtime_tables
from autotune.plan.plan import Plan
from autotune.search.assemble import build_plans
from autotune.search.choices import choice_values, valid_stage_sizes
from autotune.search.cuts import dp_inputs
from autotune.search.intra_op import IntraOpResult, stage_study
from autotune.search.space import SearchSpace
from autotune.search.tables import SliceContext
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import is_training

__all__ = ["runtime_space", "SearchProblem", "SliceKey", "SliceOutcome", "SliceSearch", "plan_slices"]


@dataclass(frozen=True, kw_only=True)
class SearchProblem:
    model: ModelSpec
    workload: object
    runtime: Runtime
    cluster: ClusterSpec
    gpus: int
    space: SearchSpace
    seed: int = 0
    method: str = "optuna"  # or "exhaustive"

    def __post_init__(self) -> None:
        # Stage tables see the cluster as evaluate_plan does: CPU workers sharing cores run slower.
        object.__setattr__(self, "cluster", self.cluster.for_gpus(self.gpus))
        if self.space.recompute_early_stop and not self.runtime.recompute_early_stop:
            # the space's runtime recomputes as PyTorch's checkpoint does (search_spaces/torchtitan.toml)
            object.__setattr__(self, "runtime", self.runtime.with_changes(recompute_early_stop=True))
        object.__setattr__(self, "space", runtime_space(self.space, self.runtime))


# runtime_space's answers by the identity of its (frozen) inputs, each entry holding them (so
# their ids name them while it lives): a warm process's queries share one space and runtime, and
# the same space object keeps its fingerprint text (autotune.search.cache) instead of a new one
# validated and written out again every query.
_RUNTIME_SPACES: dict[tuple[int, int], tuple[SearchSpace, Runtime, SearchSpace]] = {}
_RUNTIME_SPACES_KEPT = 64


def runtime_space(space: SearchSpace, runtime: Runtime) -> SearchSpace:
    """The space less what the runtime cannot run: ZeRO stages it lacks, FSDP2's reshard and HSDP
    variants where it has none; TP communication overlapped where the runtime overlaps it; the
    runtime's context-parallel exchange unless the space names its own (kept by identity)."""
    found = _RUNTIME_SPACES.get((id(space), id(runtime)))
    if found is not None and found[0] is space and found[1] is runtime:
        return found[2]
    made = _runtime_space(space, runtime)
    if len(_RUNTIME_SPACES) >= _RUNTIME_SPACES_KEPT:
        _RUNTIME_SPACES.pop(next(iter(_RUNTIME_SPACES)))
    _RUNTIME_SPACES[(id(space), id(runtime))] = (space, runtime, made)
    return made


def _runtime_space(space: SearchSpace, runtime: Runtime) -> SearchSpace:
    zero = tuple(z for z in space.zero if z in runtime.zero_stages) or (min(runtime.zero_stages),)
    sharding = space.sharding if runtime.reshard_variants else ("full",)
    return replace(space, zero=zero, sharding=sharding, overlap_tp_comm=space.overlap_tp_comm or runtime.overlap_tp_comm,
                   cp_comm=space.cp_comm or (runtime.cp_comm,))


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


def micro_batch_sizes(problem: SearchProblem, dp: int) -> tuple[int, ...]:
    """Micro-batch sizes of a replica: the space's that divide its batch; inference also tries
    every power of two up to the whole replica batch, and the whole batch (a decode step reads
    the weights once per micro-batch, so serving favours large ones)."""
    per_replica = problem.workload.global_batch // dp
    sizes = {b for b in problem.space.micro_batch if per_replica % b == 0}
    if not is_training(problem.workload):
        sizes |= {1 << k for k in range(per_replica.bit_length()) if per_replica % (1 << k) == 0} | {per_replica}
    return tuple(sorted(sizes))


def plan_slices(problem: SearchProblem) -> list[SliceKey]:
    """Every (dp, micro-batch) pair the GPU count, the batch and the space allow."""
    keys = []
    for dp in _divisors(math.gcd(problem.gpus, problem.workload.global_batch)):  # dp divides both
        keys += [SliceKey(dp, b) for b in micro_batch_sizes(problem, dp)]
    return keys


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (in sqrt(n) steps: a scheduler's thousands of GPUs
    are walked per query)."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


@dataclass
class SliceSearch:
    """Runs slices; intra-op studies are shared by the slices of one dp and kept between calls,
    and in ``cache`` (a PlanCache) across searches of the same model, workload and cluster."""

    problem: SearchProblem
    cache: object | None = None
    studies: dict[tuple[int, int], IntraOpResult] = field(default_factory=dict)
    num_trials: int = 0
    # best_by_inflight tables by (result, micro-batch index, micro-batches): the deepest made so far
    inflight_tables: dict = field(default_factory=dict)
    sizes_by_dp: dict[int, tuple[int, ...]] = field(default_factory=dict)  # micro_batches, asked per table
    stage_sizes_by_dp: dict[int, tuple[int, ...]] = field(default_factory=dict)  # stage_sizes
    with_baselines: bool = False  # the caller scores the baselines: a worker process may score them beside its tables
    baselines: tuple | None = None  # autotune.search.baselines.baselines(problem), where a worker scored them

    def __post_init__(self) -> None:
        w = self.problem.workload
        self.tables = runtime_tables(self.problem.model, w, self.problem.runtime)  # the runtime's operator stream or graph
        self.capacity = self.problem.cluster.device.memory_bytes
        self.keys = plan_slices(self.problem)
        self.uniform = None
        if self.problem.space.uniform_stages and is_training(w):  # one choice for every stage: bounded enumeration
            from autotune.search.uniform import UniformSearch

            self.uniform = UniformSearch(self)
        if self.cache is not None:
            from autotune.search.cache import fingerprint

            p = self.problem
            self.base_key = fingerprint(p.model, p.workload, p.runtime, p.cluster, p.space, p.seed, p.method)

    @property
    def num_studies(self) -> int:
        """(dp, stage size) problems whose stage choices were priced."""
        return len(self.studies) + (len(self.uniform.studies) if self.uniform is not None else 0)

    def has_shapes(self) -> bool:
        """Whether some pipeline of the space's submeshes fills a replica's GPUs (else more
        choices, offloading among them, cannot help)."""
        if self.uniform is None:
            return True
        screens = self.uniform.screens
        return any(screens.classes(dp, mp) for dp in screens.dps() for mp, _ in screens.submeshes(dp))

    def evaluate(self, plan: Plan) -> Estimate:
        p = self.problem
        return evaluate_plan(p.model, p.workload, p.cluster, plan, runtime=p.runtime)

    def micro_batches(self, dp: int) -> tuple[int, ...]:
        found = self.sizes_by_dp.get(dp)
        if found is None:
            found = self.sizes_by_dp[dp] = micro_batch_sizes(self.problem, dp)
        return found

    def stage_sizes(self, dp: int) -> list[int]:
        found = self.stage_sizes_by_dp.get(dp)  # asked per slice and class by the uniform search's screens
        if found is None:
            found = self.stage_sizes_by_dp[dp] = tuple(
                m for m in (s // dp for s in valid_stage_sizes(self.problem.gpus, self.problem.cluster.gpus_per_node)
                            if s % dp == 0) if m >= 1)
        return list(found)

    def study(self, dp: int, model_parallel: int) -> IntraOpResult | None:
        key = (dp, model_parallel)
        if key not in self.studies:
            self.studies[key] = self._cached_study(dp, model_parallel)
        return self.studies[key]

    def _cache_key(self, dp: int, model_parallel: int) -> tuple:
        from autotune.search.tables import positions_needed

        positions = tuple(positions_needed(self._slice_context(dp), dp * model_parallel))
        return (self.base_key, dp, model_parallel, self.micro_batches(dp), positions)

    def _cached_study(self, dp: int, model_parallel: int) -> IntraOpResult | None:
        if self.cache is None:
            return self._run_study(dp, model_parallel)
        key = self._cache_key(dp, model_parallel)
        found = self.cache.study(key)
        if found is None:
            found = self._run_study(dp, model_parallel)
            self.cache.store_study(key, found or False)
        return found or None

    def prefetch(self, dps: list[int]) -> None:
        """Run the studies of ``dps`` not yet made (nor cached) in worker processes where that
        pays (autotune.search.parallel); those it does not run are made on first use as before."""
        from autotune.search.parallel import run_studies

        pending = []
        for key in [(dp, m) for dp in dps for m in self.stage_sizes(dp)]:
            if key in self.studies:
                continue
            found = self.cache.study(self._cache_key(*key)) if self.cache is not None else None
            if found is not None:
                self.studies[key] = found or None
            else:
                pending.append(key)
        made = run_studies(self, pending)
        for key in pending:  # in the order the search would have made them
            if key in made:
                result = self.studies[key] = made[key]
                self.num_trials += result.num_trials if result is not None else 0
                if self.cache is not None:
                    self.cache.store_study(self._cache_key(*key), result or False)

    def _slice_context(self, dp: int) -> SliceContext:
        p = self.problem
        return SliceContext(tables=self.tables, workload=p.workload, runtime=p.runtime, cluster=p.cluster, dp=dp,
                            micro_batches=self.micro_batches(dp), gpus=p.gpus, overlap_tp_comm=p.space.overlap_tp_comm)

    def _run_study(self, dp: int, model_parallel: int) -> IntraOpResult | None:
        p = self.problem
        ctx = self._slice_context(dp)
        values = choice_values(p.space, p.model, p.workload, p.cluster, model_parallel, dp,
                               extra=self._inference_values(dp, model_parallel))
        if not values:
            return None
        # small spaces enumerated, larger ones sampled by Optuna, partial recomputation vectorised
        result = stage_study(ctx, p.space, values, model_parallel, seed=p.seed + 1000 * dp + model_parallel,
                             exhaustive=p.method == "exhaustive")
        self.num_trials += result.num_trials
        return result

    def _inference_values(self, dp: int, model_parallel: int) -> dict[str, list] | None:
        """KV-cache placements the cluster has tiers for, and the cache groupings that fit."""
        p = self.problem
        if is_training(p.workload):
            return None
        kv = [o for o in p.space.kv_cache if o == "hbm" or (o.startswith("cxl") and p.cluster.cxl_link is not None)
              or o.startswith("host")]
        grouping = ["off"]
        if p.space.cache_grouping:
            from autotune.cost.cache import grouping_choices

            per_seq = 1 if p.workload.kind == "decode" else p.workload.seq_len
            tokens = min(self.micro_batches(dp)) * per_seq
            for tp in (t for t in p.space.tp if model_parallel % t == 0):
                for layers, tile in grouping_choices(self.tables.layer, p.cluster.device, tp=tp, sequence_parallel=False,
                                                     num_layers=p.model.num_layers, tokens_per_seq=per_seq,
                                                     tokens_per_microbatch=tokens)[1:]:
                    if f"{layers}x{tile}" not in grouping:
                        grouping.append(f"{layers}x{tile}")
        return {"kv_cache": kv or ["hbm"], "grouping": grouping}

    def results(self, dp: int) -> list[IntraOpResult]:
        return [r for m in self.stage_sizes(dp) if (r := self.study(dp, m)) is not None]

    def lower_bound_s(self, key: SliceKey) -> float:
        """No plan of the slice is faster: a stage of n layers on m units takes at least
        n * a_m, a_m the least per-layer time of a fitting choice holding one micro-batch, so
        max_i t_i >= sum_i n_i a_m m_i / U >= L min_m(a_m m) / U, and the step >= B max_i t_i."""
        if self.uniform is not None:
            return self.uniform.lower_bound_s(key)[0]
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
        """Solve slices in order of their lower bounds, skipping those that cannot win. Uniform
        spaces order them by a coarse bound first and make a slice's exact bound only when it
        comes up (it goes back in line if that is larger): slices a good plan prunes on their
        coarse bound never price their memory screens."""
        if self.uniform is None:
            self.prefetch(sorted({k.dp for k in keys}))  # the bounds read every dp's studies
            line = [(self.lower_bound_s(k), True, k) for k in keys]
        else:
            if self.problem.method != "exhaustive":
                self.uniform.screens.prefetch(keys)  # in worker processes where that pays
            line = [(bound, False, k) for bound, k in zip(self.uniform.coarse_bounds_s(keys), keys)]
        heapq.heapify(line)
        known = False  # whether a plan's step bounds the slices left
        while line:
            if not known and self.uniform is not None and math.isfinite(prune_above()):
                known = True  # the screens the slices left may ask for, made in worker processes where that pays
                self.uniform.prefetch_below([k for _, _, k in line], prune_above())
            bound, exact, key = heapq.heappop(line)
            if bound >= prune_above():
                yield SliceOutcome(key=key, plan=None, estimate=None, lower_bound_s=bound, pruned=True)
                continue
            if not exact:  # its bound with memory, made only as far as the next slice's (or the best plan's)
                cap = min(line[0][0] if line else math.inf, prune_above())
                found, whole = self.uniform.lower_bound_s(key, cap)
                heapq.heappush(line, (max(bound, found), whole, key))
                continue
            plan, estimate = self.solve_slice(key, prune_above())
            # a uniform slice without a plan had every candidate cut by its floor (inf: nothing fits)
            yield SliceOutcome(key=key, plan=plan, estimate=estimate, lower_bound_s=bound,
                               pruned=plan is None and self.uniform is not None)

    def solve_slice(self, key: SliceKey, prune_above: float = math.inf) -> tuple[Plan | None, Estimate | None]:
        if self.uniform is not None:
            return self.uniform.solve(key, prune_above)
        best: tuple[Plan | None, Estimate | None] = (None, None)
        for plan in build_plans(self, key, prune_above):
            estimate = self.evaluate(plan)
            if best[1] is None or _better(estimate, best[1]):
                best = (plan, estimate)
        return best


def _better(a: Estimate, b: Estimate) -> bool:
    if a.fits != b.fits:
        return a.fits
    return a.step_time_s < b.step_time_s if a.fits else a.peak_memory_bytes_per_gpu < b.peak_memory_bytes_per_gpu
