"""Inter-operator level: cut the layers into pipeline stages on submeshes (Alpa's stage DP).

A pure function over numpy arrays (no Optuna, no torch). Inputs, for M submesh sizes:

* ``time_s[m, n, p, r]``: one micro-batch through a stage of ``n`` layers on submesh ``m`` at
  position ``p`` (0 middle, 1 first, 2 last, 3 only stage) holding ``r`` micro-batches in
  flight; ``inf`` where it does not fit;
* ``tail_s[m, n, p, r]``: the step's tail (gradient sync, optimizer) of that stage;
* ``units[m]``: GPUs of submesh ``m`` in units of one data-parallel group.

Objective (1F1B / GPipe, Alpa eq. 1 plus the step's tail as the estimate prices it,
autotune.cost.evaluate.assemble_estimate: the largest tail of any stage):

    sum_i t_i + (B - 1) * max_i t_i + max_i tail_i

Stage i counted from the end (j = 1 is the last stage) holds min(j, B) micro-batches (1F1B).
As in Alpa, each max term is handled through a cap (t_max on every stage time, tail_max on every
stage tail), each pair of caps a DP minimising sum_i t_i; the caps are searched by branch and
bound over the candidate stage times and tails (autotune.search.caps: a lower bound per box of
caps) instead of pair by pair. Exact; tested against brute force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.search.caps import branch_and_bound
from autotune.search.stage_cuts import FIRST, MIDDLE, StageCut, cuts_of, raw_objective, stage_tails, stage_times, trace_raw
from autotune.search.stage_cuts import LAST, SINGLE, combine as _combine, objective as _objective, trace as _trace  # noqa: F401  (assemble.py and tests read them here)
from autotune.search.stage_tables import StageTables

__all__ = ["StageCut", "PipelineSolution", "solve_pipeline", "OBJECTIVES"]

# "pipeline": sum_i t_i + (B - 1) max_i t_i + max_i tail_i (training, and prefill with no tail);
# "rounds": max(sum_i t_i, B max_i t_i) + max_i tail_i, one decode round (every micro-batch's
# token crosses all stages; the slowest stage serves all B micro-batches).
OBJECTIVES = ("pipeline", "rounds")

@dataclass(frozen=True, kw_only=True)
class PipelineSolution:
    objective_s: float
    stages: tuple[StageCut, ...]


def _capped(tables: StageTables, r: int, N: int, t_max: float, tail_max: float) -> np.ndarray:
    """[m, n = 1..N, k]: the stage time where it is under the cap and its tail under ``tail_max``."""
    time = tables.time_at(r)[:, 1:N + 1]
    with np.errstate(invalid="ignore"):
        ok = time <= t_max
    if tail_max < np.inf:
        ok &= tables.tail_at(r)[:, 1:N + 1] <= tail_max
    return np.where(ok, time, np.inf)


def _min_sum(tables: StageTables, units: np.ndarray, total_units: int, num_microbatches: int, max_stages: int,
             t_max: float, keep_path: bool = False, inflight_all: bool = False, bottleneck: bool = False,
             tail_max: float = np.inf):
    """min over j of H_j[0, U]: least sum of capped stage times using every unit, each stage's
    tail at most ``tail_max``.

    H_j[k, u] = min over (m, n) of cost[m, n at k] + H_{j-1}[k + n, u - units[m]], n only up to
    the most layers a stage under the cap can hold (larger n cost inf: the same minimum).
    ``bottleneck``: the least slowest-stage time instead (max of stage times for the sum).
    """
    L, max_r = tables.num_layers, tables.depth - 1
    N = tables.max_layers(t_max)
    prev = np.full((L + 1, total_units + 1), np.inf)
    prev[L, 0] = -np.inf if bottleneck else 0.0
    best, best_j, path = np.inf, 0, []
    if N == 0:
        return best, best_j, path
    combine = np.maximum if bottleneck else np.add
    capped: dict[int, np.ndarray] = {}  # by r: [k, 1, m, n]
    # laid out [k, u, m, n]: the minimum over (m, n) runs along memory, in the same (m, n) order
    gather, gather_ok = tables.gather[1:N + 1].T, tables.gather_ok[1:N + 1].T[:, None, :]  # [k, n]
    M, U = len(units), total_units + 1
    shifted = np.full((L + 1, U, M, N), np.inf)
    for j in range(1, max_stages + 1):
        r = _inflight(j, num_microbatches, max_r, inflight_all)
        if r not in capped:
            capped[r] = _capped(tables, r, N, t_max, tail_max).transpose(2, 0, 1)[:, None]
        later = np.where(gather_ok, prev[gather].transpose(0, 2, 1), np.inf)  # [k, u, n]
        for m, unit in enumerate(units):
            if unit <= total_units:
                shifted[:, unit:, m, :] = later[:, : U - unit, :]
        total = combine(capped[r], shifted).reshape(L + 1, U, M * N)
        arg = total.argmin(axis=-1)
        prev = np.take_along_axis(total, arg[..., None], axis=-1)[..., 0]
        if keep_path:
            path.append((arg // N, arg % N + 1, r))
        if prev[0, total_units] < best:
            best, best_j = prev[0, total_units], j
        if not np.isfinite(prev).any():
            break
    return best, best_j, path


def _inflight(j: int, num_microbatches: int, max_r: int, inflight_all: bool) -> int:
    """Micro-batches held by the j-th stage from the end: min(j, B) under 1F1B; all B (and
    at most the table's depth) when every micro-batch stays resident (inference KV caches)."""
    return min(num_microbatches, max_r) if inflight_all else min(j, num_microbatches, max_r)


def _min_sum_uniform(tables: StageTables, num_stages: int, num_microbatches: int, t_max: float, keep_path: bool = False,
                     inflight_all: bool = False, bottleneck: bool = False, tail_max: float = np.inf):
    """Exactly ``num_stages`` stages on one submesh size: the unit count is the stage count,
    each stage's tail at most ``tail_max``.
    Stage j from the end starts at a layer k with max(L - j * N, S - j) <= k <= L - j (N: the most
    layers under the cap; the S - j stages before it hold a layer each), the first stage at k = 0
    only, and a stage holds n <= min(N, L - S + 1) layers; other entries are inf, and no later
    stage reads them (the trace follows rows in these ranges only), so they are not made.
    ``bottleneck``: the least slowest-stage time instead of the least sum."""
    L, max_r, S = tables.num_layers, tables.depth - 1, num_stages
    N = tables.max_layers(t_max)
    path = []
    if N == 0 or S * N < L:
        return np.inf, S, path
    N = min(N, L - S + 1)  # wider columns are inf everywhere a later stage reads: the same least, first at the same n
    combine = np.maximum if bottleneck else np.add
    # prev[k + n] for every (n, k): a strided window over prev padded with its last entry (the
    # gather clamps k + n to L there, and those entries are inf in the stage costs anyway);
    # two buffers take turns as prev and the next prev
    # (ndarray views over each buffer from its second entry: as_strided's checks cost more than a stage)
    buffers = [np.full(L + 2 + N, np.inf) for _ in range(2)]
    step = buffers[0].itemsize
    windows = [np.ndarray((L + 1, N), buffer=b, offset=step, strides=(step, step)) for b in buffers]
    prev = buffers[0]
    prev[L:] = -np.inf if bottleneck else 0.0
    no_submesh = np.zeros((L + 1, 1), dtype=int)
    # the argmin of each row read (its layers less one), made the layers (0 unread) at the end at once
    stage_layers = np.full((S, L + 1, 1), -1) if keep_path else None
    scratch = np.empty((L + 1, N))  # a stage's [k, n] totals, made in place
    flat, row_starts = scratch.reshape(-1), np.arange(0, (L + 1) * N, N)
    capped = tables.under_caps(t_max, tail_max, by_depth=True)  # [r, pos, n], each row contiguous
    for j in range(1, S + 1):
        r = _inflight(j, num_microbatches, max_r, inflight_all)
        lo, hi = (0, 1) if j == S else (max(L - j * N, S - j), L - j + 1)  # the starts k stage j from the end reads
        window = windows[(j - 1) % 2][lo:hi]  # [k, n]: prev[k + n]
        total = scratch[: hi - lo]
        if j == 1:  # the last stage: [k, n] the stage's cost (inf past the last layer) and prev[k + n]
            combine(tables.window_under_cap(r, lo, hi, N, t_max, tail_max), window, out=total)
        elif j < S:  # prev is inf from layer L on, so only k + n < L counts: a middle stage's time
            # there, broadcast over k (no [k, n] table: it took as long as the DP at 1,000 layers, issue 29)
            combine(window, capped[r, MIDDLE, 1:N + 1], out=total)
        else:  # the first stage: its time and the later stages'
            combine(capped[r, FIRST, 1:N + 1], window[0], out=total[0])
        prev = buffers[j % 2]
        prev.fill(np.inf)
        # a row's least, read at its argmin (NaN where it has one: argmin points at it); argmin
        # along a row is a fraction of a min reduction's cost at these sizes (tens of layers)
        arg = total.argmin(axis=1)
        prev[lo:hi] = flat[row_starts[: hi - lo] + arg]
        if keep_path:  # same layout as the general path, with a single unit column
            stage_layers[j - 1, lo:hi, 0] = arg
            path.append((no_submesh, stage_layers[j - 1], r))
    if keep_path:
        stage_layers += 1
    return prev[0], S, path


def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    """np.unique of NaN-free values (np.unique's first call loads numpy.ma, ~10 ms of a CLI run)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if values.size else values


def _solver(tables: StageTables, units: np.ndarray, total_units: int, num_microbatches: int, max_stages: int,
            inflight_all: bool):
    """solve(t_max, keep_path, least_max, tail_max): the capped DP over these tables (one
    submesh size: exactly total_units / units[0] stages, traced with no unit column)."""
    if len(units) == 1:
        stages = total_units // int(units[0])
        return lambda t, keep=False, least_max=False, d=np.inf: _min_sum_uniform(
            tables, stages, num_microbatches, t, keep, inflight_all, least_max, d)
    return lambda t, keep=False, least_max=False, d=np.inf: _min_sum(
        tables, units, total_units, num_microbatches, max_stages, t, keep, inflight_all, least_max, d)


def solve_pipeline(time_s: np.ndarray, tail_s: np.ndarray, units: np.ndarray, total_units: int,
                   num_microbatches: int, max_stages: int, *, objective: str = "pipeline",
                   inflight_all: bool = False, at_most: float = np.inf) -> PipelineSolution | None:
    """The stage cuts minimising ``objective`` (OBJECTIVES); None when nothing fits.
    ``inflight_all``: every stage holds all B micro-batches (table depth R >= B needed).
    ``at_most``: None also when no plan scores at most this (a caller's best so far: boxes of caps
    whose bound is above it are not solved; the least plan at or under it is the same)."""
    units = np.asarray(units, dtype=int)
    num_layers = time_s.shape[1] - 1
    max_stages = min(max_stages, num_layers, total_units // max(1, int(units.min())))
    if len(units) == 1 and (total_units % units[0] or total_units // units[0] > max_stages):
        return None
    tables = StageTables(time_s, tail_s)
    solve = _solver(tables, units, total_units, num_microbatches, max_stages, inflight_all)
    trace_units, trace_total = (np.array([0]), 0) if len(units) == 1 else (units, total_units)

    def solve_cuts(t_max: float, tail_max: float):
        total, best_j, path = solve(t_max, True, False, tail_max)
        return total, (trace_raw(path, best_j, trace_units, trace_total) if np.isfinite(total) else None)

    floor, cuts = solve_cuts(np.inf, np.inf)
    if cuts is None:
        return None
    score = lambda plan: raw_objective(time_s, tail_s, plan, num_layers, num_microbatches, objective)  # noqa: E731
    measure = lambda plan: (max(stage_times(time_s, plan, num_layers)), max(stage_tails(tail_s, plan, num_layers)))  # noqa: E731
    lower = lambda f, c, d: _combine(objective, f, c, num_microbatches) + d  # noqa: E731
    least_tail = lambda t: _solver(t, units, total_units, num_microbatches, max_stages, inflight_all)(np.inf, least_max=True)[0]  # noqa: E731
    found = _candidates(tables, solve, least_tail, floor, lambda: (score(cuts), cuts), lower, num_microbatches, at_most,
                        _least_slowest(tables, units, total_units, max_stages))
    if not isinstance(found, tuple):
        return found  # settled before any box of caps: the least-sum plan, or None
    caps, tails, bar = found
    value, found = branch_and_bound(solve_cuts, caps, tails, floor, cuts, bar, score, measure, lower)
    if found is None:  # no box under the caller's bar held a plan scoring under it
        return None
    return _at_most((value, found), at_most)


def _candidates(tables: StageTables, solve, least_tail, floor: float, scored, lower, num_microbatches: int, at_most: float,
                least_slowest: float):
    """The candidate slowest stages and largest tails of branch_and_bound, and the best to beat
    (caps, tails, bar); or the answer where it is settled before: None where every plan scores
    above ``at_most``, the least-sum plan (``scored()``: its (objective, cuts)) where nothing
    bounds lower. No plan's slowest stage is under the least slowest of any, nor its largest tail
    under the least largest tail of any (lower caps have no plan); with one micro-batch the
    slowest stage is not scored: one cap, the largest. Each least is a DP of its own (``solve``'s
    bottleneck; ``least_tail`` over tables of the tails as stage times), solved only where the
    plain least leaves room under the best."""
    values, tails = tables.stage_time_values(), tables.stage_tail_values()
    values = values[values < np.inf]
    if lower(floor, max(float(values.min()), least_slowest), tails.min()) > at_most:
        return None  # every plan scores above the caller's best
    best = scored()
    if lower(floor, values.min(), tails.min()) >= best[0]:
        return _at_most(best, at_most)  # the least-sum plan: nothing bounds lower
    if num_microbatches > 1:
        least_max = solve(np.inf, least_max=True)[0]
        if lower(floor, least_max, tails.min()) > at_most:
            return None  # no plan's slowest stage is faster: every plan scores above the caller's best
    caps = _distinct_sorted(values[values >= least_max]) if num_microbatches > 1 else values.max(keepdims=True)
    # a box bounded above ``at_most`` holds no plan the caller takes: searched as if a plan just
    # above it were known (one ulp above, so that a plan scoring exactly ``at_most`` is still found)
    bar = (np.nextafter(at_most, np.inf), None) if at_most < best[0] else best
    if tails.max() > tails.min() and lower(floor, caps[0], tails.min()) < bar[0]:
        time_s = tables.time_s
        tails = tails[tails >= least_tail(StageTables(np.where(time_s < np.inf, tables.tail_s, np.inf), tables.tail_s))]
    return caps, _distinct_sorted(tails), bar


def _least_slowest(tables: StageTables, units: np.ndarray, total_units: int, max_stages: int) -> float:
    """A floor on a plan's slowest stage: some stage holds at least ceil(L / S) layers (S: the
    stage count on one submesh size, else the most stages), and takes at least the least time
    of a stage of that many layers or more (any submesh, position and depth)."""
    stages = total_units // int(units[0]) if len(units) == 1 else max_stages
    return float(tables.least_time_by_n[-(-tables.num_layers // stages):].min())


def _at_most(best: tuple, at_most: float) -> PipelineSolution | None:
    """The solution of (objective, cuts), or None if it scores above ``at_most``."""
    return PipelineSolution(objective_s=best[0], stages=cuts_of(best[1])) if best[0] <= at_most else None

