"""What the uniform search's heaps hold besides classes and members (autotune.search.uniform):
a member's partial recomputation counts, taken as one item until they come up, and the checks
made on a member when it is taken.

A full-recomputation member's counts are pushed with its class's floor (no count of the class
floors below it: the class floor bounds every member and count, autotune.search.members) and
their own floors are made only when that item is taken: in the warm loop of `large` over GPU
counts 3 of 3,950 such items were ever taken, and making their floors up front was a tenth of
the loop. Taken, they go back in line at their least floor (one Counts item), then one by one,
so the heap yields every count in the order it would with each pushed on its own.
"""

from __future__ import annotations

import heapq

import numpy as np

from autotune.search.members import count_costs, count_floors
from autotune.search.tables import ChoiceCosts

__all__ = ["Counts", "LazyCounts", "push_counts", "push_lazy_counts", "tables_at", "dominates", "materialise",
           "beats"]


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


class LazyCounts:
    """A member's counts before their floors are made (at one micro-batch size ``b_index``, for
    a pipeline of ``shape``, as members.count_floors)."""

    __slots__ = ("mi", "i", "full", "none", "counts", "b_index", "capacity_bytes", "shape")

    def __init__(self, mi: int, i: int, full: ChoiceCosts, none: ChoiceCosts, counts, b_index: int,
                 capacity_bytes: float, shape: tuple):
        self.mi, self.i, self.full, self.none, self.counts = mi, i, full, none, counts
        self.b_index, self.capacity_bytes, self.shape = b_index, capacity_bytes, shape

    def items(self, side: int):
        """The items the counts are once their ``side`` floors are made: one Counts item at their
        least floor, or each count on its own where a floor is NaN."""
        floors = count_floors(self.none, self.full, np.array(self.counts, dtype=int), self.b_index, self.capacity_bytes,
                              self.shape, side)
        counts = Counts(self.mi, self.i, self.full, self.none, self.counts, floors[0].tolist(), floors[1].tolist())
        if np.isnan(floors[side]).any():
            return list(counts.items())
        least = float(floors[side].min())
        return [(least, least, (self.mi, self.i, 0), counts)]


def _push(heap: list, tie, items, side: int, mp: int, stages: int) -> None:
    for plain, inter, rank, member in items:
        heapq.heappush(heap, (inter if side else plain, 1, rank, next(tie), (mp, stages, member)))


def push_counts(heap: list, tie, payload: tuple, side: int) -> None:
    """A taken Counts item's counts, each back in line at its own floor."""
    mp, stages, counts = payload
    _push(heap, tie, counts.items(), side, mp, stages)


def push_lazy_counts(heap: list, tie, payload: tuple, side: int) -> None:
    """A taken LazyCounts item, back in line at its counts' floors."""
    mp, stages, lazy = payload
    _push(heap, tie, lazy.items(side), side, mp, stages)


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
