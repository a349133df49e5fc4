"""What the uniform search's heaps hold besides classes and members (autotune.search.uniform):
a full-recomputation member's partial recomputation counts, taken as one item at their least
floor, then put back one by one (so the heap yields every count in the order it would with each
pushed on its own: most are never taken), and the checks made on a member when it is taken.
"""

from __future__ import annotations

import heapq

import numpy as np

from autotune.search.members import count_costs
from autotune.search.tables import ChoiceCosts

__all__ = ["Counts", "push_counts", "tables_at", "dominates", "materialise", "beats"]


class Counts:
    """The partial recomputation counts of one full-recomputation member and their floors: taken
    from a heap as one item at their least floor, then put back one by one (push_counts)."""

    __slots__ = ("mi", "i", "full", "none", "counts", "plains", "inters")

    def __init__(self, mi: int, i: int, full: ChoiceCosts, none: ChoiceCosts, counts, plains: list, inters: list):
        self.mi, self.i, self.full, self.none, self.counts, self.plains, self.inters = mi, i, full, none, counts, plains, inters

    def items(self):
        """(1F1B floor, interleaved floor, rank, payload) of each count, as a member's item."""
        for k, a, c in zip(self.counts, self.plains, self.inters):
            yield float(a), float(c), (self.mi, self.i, int(k)), (self.full, self.none, int(k))


def push_counts(heap: list, tie, payload: tuple, side: int) -> None:
    """A taken Counts item's counts, each back in line at its own floor."""
    mp, stages, counts = payload
    for plain, inter, rank, member in counts.items():
        heapq.heappush(heap, (inter if side else plain, 1, rank, next(tie), (mp, stages, member)))


def tables_at(costs: ChoiceCosts, b_index: int) -> np.ndarray:
    """A member's tables at one micro-batch size, stacked [time, tail, base, per][n, pos]."""
    return np.stack([costs.time_s[b_index], costs.tail_s[b_index], costs.mem_base_bytes[b_index],
                     costs.mem_per_microbatch_bytes[b_index]])


def dominates(earlier: np.ndarray, later: np.ndarray) -> bool:
    """Whether no plan of ``later``'s scores below the same plan of ``earlier``'s: the stage DP's
    objective only grows with a stage's time and tail, and a stage that fits with more memory
    fits with less (the caller checks that ``earlier`` also ranks first, so it wins a tie)."""
    with np.errstate(invalid="ignore"):
        return bool(np.all((earlier <= later) | np.isinf(later) & (later > 0)))


def materialise(spec) -> ChoiceCosts:
    """A member's tables from its heap payload: its own, or a count's made from its two."""
    full, none, count = spec
    return full if none is None else count_costs(none, full, count)


def beats(a, b) -> bool:
    """Whether estimate ``a`` beats ``b``: fitting first, then the faster (or, neither fitting, the smaller)."""
    if a.fits != b.fits:
        return a.fits
    return a.step_time_s < b.step_time_s if a.fits else a.peak_memory_bytes_per_gpu < b.peak_memory_bytes_per_gpu
