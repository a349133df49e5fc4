"""How a uniform-stage search floors a class on a slice from its screens (autotune.search.screens
prices them): from its bare stage's or its representative's times, with its leanest members'
memory or without (class_floors), or per way of recomputing (refined_floor). A mixin of Screens:
the screens' pricing and their floors kept apart.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.search.choices import StageChoice
from autotune.search.members import bare_floors, class_member_floors, member_floors, screen_floors
from autotune.search.tables import ChoiceCosts

__all__ = ["ScreenFloors"]


class ScreenFloors:
    """The floors of Screens (which provides classes, counts, search, time_screen, memory_screen
    and bare_screen)."""

    def _screen_at(self, key, mp: int, rep: StageChoice, recompute: str, memory_of: str | None) -> ChoiceCosts | None:
        """One micro-batch size's floor tables [1, n, pos]: the ``recompute`` representative's
        times, the least memory of the members recomputing as ``memory_of`` (None: any)."""
        found = self.time_screen(mp, rep, recompute)
        if found is None:  # no degree's stage can take the class
            return None
        sizes = self.search.micro_batches(found[0])
        memory_sizes, bases, pers = self.memory_screen(mp, rep, memory_of)
        if key.micro_batch not in sizes or key.micro_batch not in memory_sizes:
            return None
        m = memory_sizes.index(key.micro_batch)
        time = found[1].time_s[sizes.index(key.micro_batch)][None]
        return ChoiceCosts(choice=rep, time_s=time, tail_s=np.zeros_like(time), mem_base_bytes=bases[m][None],
                           mem_per_microbatch_bytes=pers[m][None])

    def refined_floor(self, key, mp: int, rep: StageChoice, shape: tuple) -> tuple[float, float]:
        """A class's (1F1B, interleaved) floor on slice ``key`` taken per way of recomputing (each
        kind's representative times and leanest memory; partial counts between the none and the
        full kinds' tables): tighter than class_floors where recomputation is what fits, at up to
        four more screens per class, shared by every degree. A kind other than none and full is
        first bounded with the representative's times (no slower: members.py) and its own memory,
        and its time screen priced only where that bound is below the other kinds' floor (else
        the least is the others', as with its own times). The kinds' floors and the counts' are
        made in one pass (class_member_floors: row by row, each the number a call of its own gives)."""
        cls = self.classes(key.dp, mp)[rep]
        kinds = sorted({c.recompute for _, c in cls.members})
        tables = {r: self._screen_at(key, mp, rep, r if r in ("none", "full") else "none", r) for r in kinds}
        if any(t is None for t in tables.values()):
            return 0.0, 0.0
        plain_kinds = [r for r in kinds if r in ("none", "full")]
        others = [r for r in kinds if r not in ("none", "full")]
        counts = self.counts.get((key.dp, mp), []) if "full" in tables else []
        pairs = [(tables.get("none") or self._screen_at(key, mp, rep, "none", "full"), tables["full"])] if counts else []
        plain, inter, by_pair = class_member_floors([tables[r] for r in plain_kinds + others], pairs,
                                                    np.array(counts, dtype=int), 0, self.search.capacity, shape)
        k = len(plain_kinds)
        best = (float(plain[:k].min()), float(inter[:k].min())) if k else (math.inf, math.inf)
        for plains, inters in by_pair:
            best = (min(best[0], float(plains.min())), min(best[1], float(inters.min())))
        for r, first, first_inter in zip(others, plain[k:].tolist(), inter[k:].tolist()):
            if first < best[0] or first_inter < best[1]:  # may set the least: with its own times
                own_plain, own_inter = member_floors([self._screen_at(key, mp, rep, r, r)], 0, self.search.capacity, shape)
                first, first_inter = float(own_plain[0]), float(own_inter[0])
            best = (min(best[0], first), min(best[1], first_inter))
        return best

    def class_floors(self, key, mp: int, reps: list[StageChoice], shape: tuple, memory: bool,
                     bare: bool = False) -> list[tuple]:
        """(1F1B, interleaved) floors of the classes ``reps`` on slice ``key`` (``shape`` as
        members._floors) from their screens (``bare``: their bare stages' times), memory included or
        not; 0 where a screen lacks the slice's micro-batch size (the class is priced to know), inf
        where the class has none.

        From their screens, the floors of the slice's other classes whose screens are ready (made,
        or in the cache: screens_ready) are made in the same pass and kept until they are asked:
        a floor with memory costs about a millisecond per call whatever its rows (bounds.py's numpy
        passes), the classes come up one at a time, and the floors are made row by row, so each is
        the number a call of its own gives."""
        if bare:
            return self._class_floors(key, mp, reps, shape, memory, bare)
        kept = self._floors.setdefault((key, mp, shape, memory), {})
        asked = [rep for rep in dict.fromkeys(reps) if rep not in kept]
        if asked:
            pending = set(asked)
            extra = [r for r in self.classes(key.dp, mp) if r not in kept and r not in pending
                     and self.screens_ready(mp, r, memory)]
            kept.update(zip(asked + extra, self._class_floors(key, mp, asked + extra, shape, memory)))
        return [kept[rep] for rep in reps]

    def _class_floors(self, key, mp: int, reps: list[StageChoice], shape: tuple, memory: bool,
                      bare: bool = False) -> list[tuple]:
        """class_floors of exactly ``reps``, in one pass."""
        out: list[tuple] = [(0.0, 0.0)] * len(reps)
        rows, where = [], []
        for j, rep in enumerate(reps):
            found = self.bare_screen(mp, rep) if bare else self.time_screen(mp, rep)
            if found is None:
                out[j] = (math.inf, math.inf)
                continue
            sizes = self.search.micro_batches(found[0])
            if key.micro_batch not in sizes:
                continue
            time = found[1].time_s[sizes.index(key.micro_batch)]
            base = per = np.zeros_like(time)
            if memory:
                memory_sizes, bases, pers = self.memory_screen(mp, rep)
                if key.micro_batch not in memory_sizes:
                    continue
                m = memory_sizes.index(key.micro_batch)
                base, per = bases[m], pers[m]
            rows.append((time, base, per))
            where.append(j)
        if rows:
            time, base, per = (np.stack(column) for column in zip(*rows))
            plain, inter = screen_floors(time, base, per, self.search.capacity if memory else math.inf, shape)
            for j, a, c in zip(where, plain.tolist(), inter.tolist()):
                out[j] = (a, c)
        return out

    def bare_class_floors(self, slices: list[tuple], mp: int, reps: list[StageChoice]) -> list[list[tuple]]:
        """class_floors(key, mp, reps, shape, memory=False, bare=True) of each (key, shape) of
        ``slices`` (one degree's: the same layers and stages, their micro-batch counts and chunks
        their own), from one pass over every slice's rows."""
        out = [[(0.0, 0.0)] * len(reps) for _ in slices]
        found = [self.bare_screen(mp, rep) for rep in reps]
        rows, where, batches, chunks = [], [], [], []
        for s, (key, shape) in enumerate(slices):
            for j, screen in enumerate(found):
                if screen is None:
                    out[s][j] = (math.inf, math.inf)
                    continue
                sizes = self.search.micro_batches(screen[0])
                if key.micro_batch in sizes:  # else 0: the class is priced to know
                    rows.append(screen[1].time_s[sizes.index(key.micro_batch)])
                    where.append((s, j))
                    batches.append(shape[2])
                    chunks.append(shape[3])
        if rows:
            layers, stages = slices[0][1][:2]
            plain, inter = bare_floors(np.stack(rows), layers, stages, np.array(batches), np.array(chunks))
            for (s, j), a, c in zip(where, plain.tolist(), inter.tolist()):
                out[s][j] = (a, c)
        return out

