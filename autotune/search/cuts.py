"""The inter-operator DP's inputs for one slice (each study's best stage cost by in-flight
micro-batches, stacked over submesh sizes) and the DP solutions (the pipeline cuts) of a slice."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from autotune.search.inter_op import PipelineSolution, solve_pipeline
from autotune.search.intra_op import IntraOpResult
from autotune.search.tables import best_by_inflight
from autotune.spec.workload import is_training

if TYPE_CHECKING:  # annotations only: the driver imports this module
    from autotune.search.driver import SliceKey, SliceSearch

__all__ = ["dp_inputs", "solve_cuts"]


def dp_inputs(search: SliceSearch, key: SliceKey, results: list[IntraOpResult], max_inflight: int):
    """Stacked stage tables of several submesh sizes for the DP: (time, tail, choice index)."""
    b_index = search.micro_batches(key.dp).index(key.micro_batch)
    num_mb = search.problem.workload.global_batch // (key.dp * key.micro_batch)
    parts = [_inflight_tables(search, r, b_index, num_mb, max_inflight) for r in results]
    time = np.stack([p[0] for p in parts])
    tail = np.stack([p[1] for p in parts])
    index = np.stack([p[2] for p in parts])
    return time, tail, index, num_mb


def _inflight_tables(search: SliceSearch, result: IntraOpResult, b_index: int, num_mb: int, max_inflight: int):
    """best_by_inflight of one study, reused: the tables for depth R are the first R + 1 of a
    deeper one (each in-flight count is scored on its own). Depth-1 tables (slice bounds) are
    kept; deeper ones only for the slice being solved (they are large)."""
    key = (id(result), b_index, num_mb)
    memo = search.inflight_tables
    if max_inflight > 1 and memo.get("deep_slice") != (result.dp, b_index, num_mb):
        for k in [k for k, v in memo.items() if k != "deep_slice" and v[1] > 1]:
            del memo[k]
        memo["deep_slice"] = (result.dp, b_index, num_mb)
    found = memo.get(key)
    if found is None or found[0] is not result or found[1] < max_inflight:
        found = (result, max_inflight, best_by_inflight(list(result.costs), b_index, num_mb, max_inflight, search.capacity,
                                                                 result.pairs, result.counts))
        memo[key] = found
    return tuple(a[..., : max_inflight + 1] for a in found[2])


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
    training = is_training(search.problem.workload)
    objective = "pipeline" if training or search.problem.workload.kind != "decode" else "rounds"
    depth = min(num_mb, max_stages) if training else num_mb
    if space.uniform_stages:  # one choice for every stage: a DP per choice, keep the best
        groups = [[_single(r, i)] for g in groups for r in g for i in range(len(r.costs))]
    out = []
    for group in groups:
        time, tail, index, _ = dp_inputs(search, key, group, depth)
        sizes = np.array([r.model_parallel for r in group])
        solution = solve_pipeline(time, tail, sizes, units, num_mb, max_stages, objective=objective,
                                  inflight_all=not training)
        if solution is not None:
            out.append((group, solution, index))
    if space.uniform_stages and out:
        out = [min(out, key=lambda item: item[1].objective_s)]
    return out


def _single(result: IntraOpResult, choice_index: int) -> IntraOpResult:
    """The study's result narrowed to one of its choices (for plans whose stages share it)."""
    return IntraOpResult(model_parallel=result.model_parallel, dp=result.dp, costs=(result.costs[choice_index],),
                         num_trials=0)  # (inference only: no recomputation counts)
