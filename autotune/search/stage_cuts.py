"""A stage DP plan's cuts, and their score as the DP objective reads it (autotune.search.inter_op).

The DP traces a plan as (submesh, first layer, layers, in flight) tuples and the caps' search
(autotune.search.caps) scores and measures every plan it traces as these; only the plan returned
becomes StageCuts (making one for every traced plan cost as much as scoring it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["StageCut", "MIDDLE", "FIRST", "LAST", "SINGLE", "trace", "trace_raw", "cuts_of", "stage_times", "stage_tails",
           "combine", "objective", "raw_objective"]

MIDDLE, FIRST, LAST, SINGLE = range(4)


@dataclass(frozen=True, kw_only=True)
class StageCut:
    submesh: int  # index into the M submesh sizes
    first_layer: int
    num_layers: int
    inflight: int


def trace(path: list, best_j: int, units: np.ndarray, total_units: int) -> tuple[StageCut, ...]:
    return cuts_of(trace_raw(path, best_j, units, total_units))


def trace_raw(path: list, best_j: int, units: np.ndarray, total_units: int) -> tuple[tuple[int, int, int, int], ...]:
    """The DP's cuts as (submesh, first layer, layers, in flight) tuples: a solve's plan is scored
    and measured as these, and only the one returned becomes StageCuts (made for every plan the
    caps' search traced, their construction cost as much as scoring them)."""
    cuts, k, u = [], 0, total_units
    for j in range(best_j, 0, -1):
        m_arg, n_arg, r = path[j - 1]
        m, n = int(m_arg[k, u]), int(n_arg[k, u])
        cuts.append((m, k, n, r))
        k, u = k + n, u - int(units[m])
    return tuple(cuts)


def position(first_layer: int, layers: int, num_layers: int) -> int:
    if first_layer == 0:
        return SINGLE if layers == num_layers else FIRST
    return LAST if first_layer + layers == num_layers else MIDDLE


def stage_times(time_s: np.ndarray, cuts: tuple, num_layers: int) -> list[float]:
    """Each stage's time, of raw cuts (trace_raw)."""
    return [float(time_s[m, n, position(k, n, num_layers), r]) for m, k, n, r in cuts]


def combine(kind: str, total: float, slowest: float, b: int) -> float:
    """The objective less its tail, from the stage-time sum and the slowest stage."""
    if kind == "rounds":
        return max(total, b * slowest)
    return total + (b - 1) * slowest


def stage_tails(tail_s: np.ndarray, cuts: tuple, num_layers: int) -> list[float]:
    """Each stage's tail of raw cuts, inf and NaN read as 0 (as _Tables reads them)."""
    found = [float(tail_s[m, n, position(k, n, num_layers), r]) for m, k, n, r in cuts]
    return [t if math.isfinite(t) else 0.0 for t in found]  # _tail_read per scalar: a ufunc call each cost more


def objective(time_s: np.ndarray, tail_s: np.ndarray, cuts: tuple[StageCut, ...], num_layers: int, b: int,
               kind: str = "pipeline") -> float:
    """The plan's objective: its stages' times combined, plus the largest tail (assemble_estimate's)."""
    return raw_objective(time_s, tail_s, tuple((c.submesh, c.first_layer, c.num_layers, c.inflight) for c in cuts),
                          num_layers, b, kind)


def raw_objective(time_s: np.ndarray, tail_s: np.ndarray, cuts: tuple, num_layers: int, b: int, kind: str) -> float:
    times = stage_times(time_s, cuts, num_layers)
    return float(combine(kind, sum(times), max(times), b) + max(stage_tails(tail_s, cuts, num_layers)))


def cuts_of(raw: tuple) -> tuple[StageCut, ...]:
    """StageCuts of raw cuts (trace_raw)."""
    return tuple(StageCut(submesh=m, first_layer=k, num_layers=n, inflight=r) for m, k, n, r in raw)
