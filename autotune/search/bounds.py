"""Floors on a pipeline's step from its stage tables, for branch and bound.

A plan of ``S`` stages cut from ``L`` layers, with stage times ``t_i`` (one micro-batch) and
``B`` micro-batches, scores ``sum_i t_i + (B - 1) max_i t_i + max_i tail_i`` under 1F1B (the stage
DP's objective, autotune.search.inter_op, and the estimate's). Under 1F1B the first stage
holds ``min(S, B)`` micro-batches, the last one and a middle one at least ``min(2, B)``, so with
``t_F(n)``, ``t_O(n)`` the least time of a first and of any other stage of ``n`` layers that fits
that many, a plan whose first stage has ``n`` layers scores at least

    t_F(n) + max(tail_F(n), min_m tail_L(m)) + a (L - n) + (B - 1) max(t_F(n), min_{m >= ceil((L - n) / (S - 1))} t_O(m))

where ``a = min_m t_O(m) / m`` (the other stages' times add up to at least ``a`` per layer and the
largest holds at least its share of the layers) and ``tail_L(m)`` the tail of a last stage of m
layers (the largest tail is at least the first stage's and the last's). The floor is the least of that over ``n``
(exact for two stages, where the other stage holds the rest). Where memory binds, the max term is
also at least least_slowest_s: stage j from the end holds min(j, B) micro-batches, so stages deep
in flight may fit fewer layers and the others must take more (a choice without recomputation on
many stages: its slowest stage is well above the layers' even share). Interleaved layouts (equal stages
of ``L / S`` layers, ``v`` chunks a rank) score ``sum_i t_i / v + (B - 1 / v) max_i t_i``
(autotune.cost.pipeline) with every stage holding the warm-up micro-batches the search allows.

Every function takes tables with the layer count on the second-to-last axis (0 unused) and the
position on the last, and broadcasts over leading axes (choices, recomputation counts).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from autotune.search.tables import FIRST, LAST, MIDDLE, SINGLE

__all__ = ["positions_of", "pipeline_floor_s", "interleaved_floor_s", "least_slowest_s"]


def positions_of(num_stages: int) -> list[int]:
    """The positions the stages of an ``num_stages``-stage pipeline take, first to last."""
    if num_stages == 1:
        return [SINGLE]
    return [FIRST] + [MIDDLE] * (num_stages - 2) + [LAST]


_LEAST = np.finfo(float).min


def _finite(x, fill: float) -> np.ndarray:
    """np.nan_to_num(x, nan=fill, posinf=fill): NaN and +inf to ``fill``, -inf to the least float,
    as it does, in two ufuncs (nan_to_num's own checks cost more than the floors' arithmetic)."""
    return np.maximum(np.where(x < np.inf, x, fill), _LEAST)


def _fitting(time, base, per, capacity_bytes: float, pos: int, inflight: int) -> np.ndarray:
    """[..., n]: the stage time at ``pos`` where it fits holding ``inflight`` micro-batches, else inf."""
    if capacity_bytes == np.inf:  # times alone (a class's first floor): everything fits
        return time[..., pos]
    with np.errstate(invalid="ignore"):
        ok = base[..., pos] + inflight * per[..., pos] <= capacity_bytes
    return np.where(ok, time[..., pos], np.inf)


def _least(values: np.ndarray) -> np.ndarray:
    """The least of each row's values, NaN read as inf (np.nan_to_num(...).min(), without the copy)."""
    least = np.fmin.reduce(values, axis=-1)
    return np.where(np.isnan(least), np.inf, least)


def _fitting_at(time, base, per, capacity_bytes: float, inflight: tuple[int, int, int, int]) -> np.ndarray:
    """_fitting at every position at once, position p holding ``inflight[p]`` micro-batches
    (the same sums, elementwise, in one pass over the tables)."""
    if capacity_bytes == np.inf:
        return time
    with np.errstate(invalid="ignore"):
        ok = base + np.array(inflight, dtype=float) * per <= capacity_bytes
    return np.where(ok, time, np.inf)


def _tail(tail: np.ndarray, pos: int) -> np.ndarray:
    """The step tail as the DP adds it (inf and NaN read as 0)."""
    return _finite(tail[..., pos], 0.0)


def _layers_held(base: np.ndarray, per: np.ndarray, capacity_bytes: float, num_stages: int,
                 num_microbatches: int) -> np.ndarray:
    """[...]: at most how many layers the stages after the first can hold together: stage j from
    the end holds min(j, B) micro-batches, and at that depth fits at most n_max(depth) layers
    (the last stage's at depth 1, a middle one's beyond; rounded up where the division is inexact)."""
    S, B = num_stages, num_microbatches
    n = np.arange(base.shape[-2])
    last = np.where(base[..., LAST] + per[..., LAST] <= capacity_bytes, n, 0).max(axis=-1)
    b, p = base[..., 1:, MIDDLE], per[..., 1:, MIDDLE]
    with np.errstate(divide="ignore", invalid="ignore"):
        most = np.where(p > 0, np.floor((capacity_bytes - b) / np.where(p > 0, p, 1.0) + 1e-9),
                        np.where(b <= capacity_bytes, np.inf, -1.0))  # the deepest depth each n fits
    most = np.where(np.isnan(most), -1.0, most)
    if S <= 2:
        return last
    # the middle stages' depths min(j, B), j = 2 .. S - 1: each distinct depth and how many stages take it
    depths = np.arange(min(2, B), min(S - 1, B) + 1, dtype=float)
    times = np.ones(depths.size)
    times[-1] += (S - 2) - depths.size
    n_max = _most_layers_by_depth(most, int(depths[-1]))[..., depths.astype(int)]  # [..., depth]
    return last + (n_max * times).sum(axis=-1)


def _most_layers_by_depth(most: np.ndarray, top: int) -> np.ndarray:
    """[..., d = 0..top]: the largest n (1-based along the last axis) with most[n] >= d, 0 if none.
    Through the running maximum from the end (non-increasing, so the n that reach d form a prefix
    and their count is the answer) and a histogram of its levels: linear in the layers, where
    comparing every depth with every n took [..., depth, n] (over a gigabyte at 1,000 layers with
    every recomputation count, issue 29)."""
    suffix = np.maximum.accumulate(most[..., ::-1], axis=-1)[..., ::-1]
    level = np.clip(np.floor(suffix), -1, top).astype(np.int64) + 1  # 0 .. top + 1; d <= depth iff d + 1 <= level
    rows = level.reshape(-1, level.shape[-1])
    bins = top + 2
    hist = np.bincount((rows + bins * np.arange(rows.shape[0])[:, None]).ravel(),
                       minlength=bins * rows.shape[0]).reshape(rows.shape[0], bins)
    reach = np.cumsum(hist[:, ::-1], axis=-1)[:, ::-1]  # [row, l]: how many n have level >= l
    return reach[:, 1:].reshape(level.shape[:-1] + (top + 1,))


def least_slowest_s(time: np.ndarray, base: np.ndarray, per: np.ndarray, capacity_bytes: float, num_layers: int,
                    num_stages: int, num_microbatches: int) -> np.ndarray:
    """[...]: no 1F1B cut into S >= 3 stages has a slowest stage faster than this (inf: none fits).

    Under a limit T a stage holds at most the largest n <= L - S + 1 whose time is at most T and
    that fits its depth; a cut whose slowest stage takes T has its L layers in stages that each
    hold at most that, so their sum is at least L. The sum is bounded above, for a middle stage of
    depth d, by min(N(T), n_d) (N(T): the most layers of a middle stage under T, n_d: the most that
    fit depth d), so the least of the tables' times T whose bound reaches L is a floor: the
    bound only grows with T, and it is read off each row's times in sorted order."""
    L, S, B = num_layers, num_stages, num_microbatches
    top, shape = L - S + 1, np.broadcast_shapes(time.shape, base.shape, per.shape)
    rows = math.prod(shape[:-2])
    t = np.broadcast_to(time, shape).reshape(rows, -1, 4)[:, 1:top + 1, [FIRST, LAST, MIDDLE]]  # [row, n = 1..top, 3]
    t = np.where(np.isnan(t), np.inf, t)
    depth = min(S - 1, B)  # the deepest a middle stage holds
    most = np.full((rows, top), float(depth))  # how deep a middle stage of n layers fits, up to that
    if capacity_bytes != np.inf:  # else times alone (a class's first floor): everything fits
        b = np.broadcast_to(base, shape).reshape(rows, -1, 4)[:, 1:top + 1]
        p = np.broadcast_to(per, shape).reshape(rows, -1, 4)[:, 1:top + 1]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            t[..., 0] = np.where(b[..., FIRST] + min(S, B) * p[..., FIRST] <= capacity_bytes, t[..., 0], np.inf)
            t[..., 1] = np.where(b[..., LAST] + p[..., LAST] <= capacity_bytes, t[..., 1], np.inf)
            bm, pm = b[..., MIDDLE], p[..., MIDDLE]
            most = np.where(pm > 0, np.floor((capacity_bytes - bm) / np.where(pm > 0, pm, 1.0) + 1e-9),
                            np.where(bm <= capacity_bytes, np.inf, -1.0))
        most = np.clip(np.where(np.isnan(most), -1.0, most), -1, depth)
    held = _middles_by_depth(S, B)
    # by_count[N]: the most layers the middle stages hold when each holds at most N: the sum over
    # n <= N of how many of them fit a stage of n or more layers
    level = np.maximum.accumulate(most[:, ::-1], axis=-1)[:, ::-1].astype(int) + 1
    by_count = np.zeros((rows, top + 1), dtype=int)
    np.cumsum(held[level], axis=-1, out=by_count[:, 1:])
    # a stage holds at most #{n: the least time of n or more layers <= T}: count each row's sorted times
    least = np.minimum.accumulate(t[:, ::-1], axis=1)[:, ::-1]  # [row, n, stage kind]
    times = least.transpose(0, 2, 1).reshape(rows, 3 * top)
    order = np.argsort(times, axis=-1, kind="stable")
    at_row = np.arange(rows)[:, None]
    times = times[at_row, order]
    is_middle = order >= 2 * top
    count = np.cumsum(~is_middle, axis=-1) + by_count[at_row, np.cumsum(is_middle, axis=-1)]
    enough = count >= L
    found = np.where(enough.any(axis=-1), times[at_row[:, 0], enough.argmax(axis=-1)], np.inf)
    return found.reshape(shape[:-2])


@lru_cache(maxsize=1024)  # the same few (S, B) in every call of a slice, and of the next GPU count's
def _middles_by_depth(num_stages: int, num_microbatches: int) -> np.ndarray:
    """held[l + 1]: how many middle stages (depths min(j, B), j = 2..S-1) are no deeper than l (read-only)."""
    S, B = num_stages, num_microbatches
    held = np.concatenate(([0], np.cumsum(np.bincount(np.minimum(np.arange(2, S), B), minlength=min(S - 1, B) + 1))))
    held.flags.writeable = False
    return held


def pipeline_floor_s(time: np.ndarray, tail: np.ndarray, base: np.ndarray, per: np.ndarray, capacity_bytes: float,
                     num_layers: int, num_stages: int, num_microbatches) -> np.ndarray:
    """No 1F1B plan of these tables scores less (inf: none fits). ``num_microbatches``: a count,
    or (times alone: ``capacity_bytes`` inf) an array of them over the leading axes, a row's own."""
    L, S, B = num_layers, num_stages, num_microbatches
    per_row = np.ndim(B) > 0
    if per_row and capacity_bytes != np.inf:
        raise ValueError("micro-batch counts per row are for floors from times alone (capacity inf)")
    if S == 1:
        one = _fitting(time, base, per, capacity_bytes, SINGLE, 1)[..., L]
        with np.errstate(invalid="ignore"):
            return _finite(B * one + _tail(tail, SINGLE)[..., L], np.inf)
    B = np.asarray(B)[..., None] if per_row else B  # against [..., first stage's layers]
    fitted = time if per_row else _fitting_at(time, base, per, capacity_bytes, (min(2, B), min(S, B), 1, 1))  # MIDDLE, FIRST, LAST, SINGLE
    first, others = fitted[..., FIRST], fitted[..., LAST]
    if S > 2:
        others = np.minimum(others, fitted[..., MIDDLE])
    n_first = np.arange(1, L - S + 2)  # the others hold at least one layer each
    rest = L - n_first
    t_first = first[..., n_first]
    tail_last = _tail(tail, LAST)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if S == 2:  # the last stage holds exactly the rest
            t_rest = others[..., rest]
            tails = np.maximum(_tail(tail, FIRST)[..., n_first], tail_last[..., rest])
            return _least(t_first + t_rest + (B - 1) * np.maximum(t_first, t_rest) + tails)
        # the largest tail: at least the first stage's and the least a last stage of 1 .. L - S + 1 layers has
        tail_first = np.maximum(_tail(tail, FIRST)[..., n_first], tail_last[..., 1:L - S + 2].min(axis=-1)[..., None])
        per_layer = _least(others[..., 1:] / np.arange(1, L + 1))[..., None]
        suffix = np.minimum.accumulate(others[..., ::-1], axis=-1)[..., ::-1]  # least time of >= m layers
        slowest = np.maximum(t_first, suffix[..., -(-rest // (S - 1))])
        summed = t_first + per_layer * rest
        room = _layers_held(base, per, capacity_bytes, S, B) if capacity_bytes != np.inf else None
        floor = _scored(summed + (B - 1) * slowest, rest, room, tail_first)
        if room is not None:  # where memory binds, stages deep in flight may hold fewer layers
            floor = _with_least_slowest(floor, summed, slowest, rest, room, tail_first, (time, base, per),
                                        capacity_bytes, (L, S, B))
    return floor


def _with_least_slowest(floor, summed, slowest, rest, room, tail_first, tables, capacity_bytes: float,
                        shape: tuple[int, int, int]) -> np.ndarray:
    """``floor`` with every plan's slowest stage at least least_slowest_s, made for the rows whose
    floor is finite only (most of a count grid's rows fit no stage: inf already)."""
    lead = floor.shape
    rows = np.flatnonzero(np.isfinite(floor))
    if not rows.size:
        return floor
    n = tables[0].shape[-2:]
    time, base, per = (np.broadcast_to(a, lead + n).reshape((-1,) + n)[rows] for a in tables)
    least = least_slowest_s(time, base, per, capacity_bytes, *shape)
    at = lambda a: np.broadcast_to(a, lead + rest.shape).reshape(-1, rest.size)[rows]  # noqa: E731
    with np.errstate(invalid="ignore", over="ignore"):
        raised = _scored(at(summed) + (shape[2] - 1) * np.maximum(at(slowest), least[:, None]), rest,
                         np.broadcast_to(room, lead).reshape(-1)[rows], at(tail_first))
    out = floor.reshape(-1).copy()
    out[rows] = raised
    return out.reshape(lead)


def _scored(total: np.ndarray, rest: np.ndarray, room, tail_first: np.ndarray) -> np.ndarray:
    """min over the first stage's layers of the floor (``tail_first``: the floor on the largest
    tail by the first stage's layers): inf where the other stages cannot hold the rest."""
    if room is not None:
        total = np.where(rest <= room[..., None], total, np.inf)
    return _least(total + tail_first)


def interleaved_floor_s(time: np.ndarray, base: np.ndarray, per: np.ndarray, capacity_bytes: float, num_layers: int,
                        num_stages: int, num_microbatches, chunks, inflight: int) -> np.ndarray:
    """The interleaved layout's table score (equal stages, ``chunks`` per rank, every stage
    fitting ``inflight`` micro-batches; inf where it cannot be laid out). ``num_microbatches`` and
    ``chunks``: counts, or arrays of them over the leading axes (a row's own)."""
    L, S, B = num_layers, num_stages, num_microbatches
    if S < 2 or L % S:
        return np.full(time.shape[:-2], np.inf)
    n = L // S
    at = {pos: _fitting(time, base, per, capacity_bytes, pos, inflight)[..., n] for pos in set(positions_of(S))}
    with np.errstate(invalid="ignore"):
        total = (at[FIRST] + at[LAST] + (S - 2) * at.get(MIDDLE, 0.0)) / chunks + (B - 1.0 / chunks) * np.maximum.reduce(
            list(at.values()))
    return _finite(total, np.inf)
