"""A uniform search's member floors made a submesh's classes at a time (autotune.search.uniform).

A class that comes up on a slice has its members and partial recomputation counts floored
(members.class_member_floors). Each call costs about a millisecond whatever its rows (the numpy
passes of autotune.search.bounds), and the classes of a submesh come up one at a time (three a
submesh on average in the warm loop of scripts/bench_search.py), so the first class to come up
on a (slice, submesh, schedule) is floored together with every other class of the submesh whose
members' tables are ready (priced by this search, or in the plan cache: nothing is priced for a
class that would not come up), and the others' floors are kept until their class comes up. The
floors are made row by row (bounds.py), so each is the number a call of its own gives.
"""

from __future__ import annotations

import numpy as np

from autotune.search.members import class_member_floors
from autotune.search.screens import price_positions

__all__ = ["MemberFloors"]


class MemberFloors:
    """Member floors of a UniformSearch's classes, kept by (slice, submesh, stages, chunks, side)."""

    def __init__(self, search) -> None:
        self.search = search
        self._kept: dict[tuple, dict] = {}

    def floors(self, key, mp: int, stages: int, rep, chunks: int, side: int | None) -> tuple:
        """(plains, inters, [(plains, inters) per full-recomputation member]) of the class ``rep``
        on slice ``key`` (as class_member_floors; ``side`` as there)."""
        if side is None:  # every class comes up (the exhaustive method): one at a time
            return self._floored(key, mp, stages, [rep], chunks, side)[rep]
        kept = self._kept.setdefault((key, mp, stages, chunks, side), {})
        if rep not in kept:
            extra = [r for r in self.search.screens.classes(key.dp, mp)
                     if r != rep and r not in kept and self._ready(key.dp, mp, stages, r)]
            kept.update(self._floored(key, mp, stages, [rep] + extra, chunks, side))
        return kept[rep]

    def forget(self, key) -> None:
        """Drop a solved slice's floors."""
        for done in [k for k in self._kept if k[0] == key]:
            del self._kept[done]

    def _ready(self, dp: int, mp: int, stages: int, rep) -> bool:
        """Whether every member of the class has its tables (this search's or the cache's)."""
        if (dp, mp, rep) in self.search._priced:
            return True
        screens, positions = self.search.screens, tuple(price_positions(stages))
        return all(screens.member_priced(dp, mp, choice, positions) for _, choice in screens.classes(dp, mp)[rep].members)

    def _floored(self, key, mp: int, stages: int, reps: list, chunks: int, side: int | None) -> dict:
        """class_member_floors of the classes ``reps`` in one pass, by class."""
        search = self.search
        counts = search.screens.counts[(key.dp, mp)]
        classes = search.screens.classes(key.dp, mp)
        costs, pairs, sizes = [], [], []
        for rep in reps:
            priced, members = search.members(key.dp, mp, stages, rep), classes[rep].members
            fulls = [i for i, choice in members if choice.recompute == "full"] if counts else []
            costs += [priced[i] for i, _ in members]
            pairs += [(priced[-1 - i], priced[i]) for i in fulls]
            sizes.append((len(members), len(fulls)))
        b = search.search.micro_batches(key.dp).index(key.micro_batch)
        plains, inters, by_full = class_member_floors(costs, pairs, np.array(counts, dtype=int), b, search.search.capacity,
                                                      search._shape(key, stages, chunks), side)
        out, m, f = {}, 0, 0
        for rep, (num_members, num_fulls) in zip(reps, sizes):
            out[rep] = (plains[m:m + num_members], inters[m:m + num_members], by_full[f:f + num_fulls])
            m, f = m + num_members, f + num_fulls
        return out
