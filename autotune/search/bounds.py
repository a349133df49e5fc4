"""Floors on a pipeline's step from its stage tables, for branch and bound.

A plan of ``S`` stages cut from ``L`` layers, with stage times ``t_i`` (one micro-batch) and
``B`` micro-batches, scores ``sum_i t_i + (B - 1) max_i t_i + tail`` under 1F1B (the stage DP's
objective, autotune.search.inter_op; ``tail`` is the first stage's). Under 1F1B the first stage
holds ``min(S, B)`` micro-batches, the last one and a middle one at least ``min(2, B)``, so with
``t_F(n)``, ``t_O(n)`` the least time of a first and of any other stage of ``n`` layers that fits
that many, a plan whose first stage has ``n`` layers scores at least

    t_F(n) + tail_F(n) + a (L - n) + (B - 1) max(t_F(n), min_{m >= ceil((L - n) / (S - 1))} t_O(m))

where ``a = min_m t_O(m) / m`` (the other stages' times add up to at least ``a`` per layer and the
largest holds at least its share of the layers). The floor is the least of that over ``n``
(exact for two stages, where the other stage holds the rest). Interleaved layouts (equal stages
of ``L / S`` layers, ``v`` chunks a rank) score ``sum_i t_i / v + (B - 1 / v) max_i t_i``
(autotune.cost.pipeline) with every stage holding the warm-up micro-batches the search allows.

Every function takes tables with the layer count on the second-to-last axis (0 unused) and the
position on the last, and broadcasts over leading axes (choices, recomputation counts).
"""

from __future__ import annotations

import numpy as np

from autotune.search.tables import FIRST, LAST, MIDDLE, SINGLE

__all__ = ["positions_of", "pipeline_floor_s", "interleaved_floor_s"]


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


def pipeline_floor_s(time: np.ndarray, tail: np.ndarray, base: np.ndarray, per: np.ndarray, capacity_bytes: float,
                     num_layers: int, num_stages: int, num_microbatches: int) -> np.ndarray:
    """No 1F1B plan of these tables scores less (inf: none fits)."""
    L, S, B = num_layers, num_stages, num_microbatches
    if S == 1:
        one = _fitting(time, base, per, capacity_bytes, SINGLE, 1)[..., L]
        with np.errstate(invalid="ignore"):
            return _finite(B * one + _tail(tail, SINGLE)[..., L], np.inf)
    fitted = _fitting_at(time, base, per, capacity_bytes, (min(2, B), min(S, B), 1, 1))  # MIDDLE, FIRST, LAST, SINGLE
    first, others = fitted[..., FIRST], fitted[..., LAST]
    if S > 2:
        others = np.minimum(others, fitted[..., MIDDLE])
    n_first = np.arange(1, L - S + 2)  # the others hold at least one layer each
    rest = L - n_first
    t_first = first[..., n_first]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if S == 2:  # the last stage holds exactly the rest
            t_rest = others[..., rest]
            total = t_first + t_rest + (B - 1) * np.maximum(t_first, t_rest)
        else:
            per_layer = _finite(others[..., 1:] / np.arange(1, L + 1), np.inf).min(axis=-1)[..., None]
            suffix = np.minimum.accumulate(others[..., ::-1], axis=-1)[..., ::-1]  # least time of >= m layers
            slowest = suffix[..., -(-rest // (S - 1))]
            total = t_first + per_layer * rest + (B - 1) * np.maximum(t_first, slowest)
            if capacity_bytes != np.inf:
                room = _layers_held(base, per, capacity_bytes, S, B)  # the other stages hold at most this many
                total = np.where(rest <= room[..., None], total, np.inf)
        total = total + _tail(tail, FIRST)[..., n_first]
    return _finite(total, np.inf).min(axis=-1)


def interleaved_floor_s(time: np.ndarray, base: np.ndarray, per: np.ndarray, capacity_bytes: float, num_layers: int,
                        num_stages: int, num_microbatches: int, chunks: int, inflight: int) -> np.ndarray:
    """The interleaved layout's table score (equal stages, ``chunks`` per rank, every stage
    fitting ``inflight`` micro-batches; inf where it cannot be laid out)."""
    L, S, B = num_layers, num_stages, num_microbatches
    if S < 2 or L % S:
        return np.full(time.shape[:-2], np.inf)
    n = L // S
    at = {pos: _fitting(time, base, per, capacity_bytes, pos, inflight)[..., n] for pos in set(positions_of(S))}
    with np.errstate(invalid="ignore"):
        total = (at[FIRST] + at[LAST] + (S - 2) * at.get(MIDDLE, 0.0)) / chunks + (B - 1.0 / chunks) * np.maximum.reduce(
            list(at.values()))
    return _finite(total, np.inf)
