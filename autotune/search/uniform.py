"""Spaces whose stages share one choice (Megatron-LM, torchtitan and DeepSpeed configs): each
slice solved exactly by branch and bound over (submesh, choice), pricing only what may win.

Within a slice (dp, micro-batch) a plan is a submesh size, one stage choice and a cut of the
layers (1F1B, by the stage DP), or equal stages interleaved. Candidates are taken in order of a
floor on their step (autotune.search.bounds) and a slice stops when no floor beats its best:

1. a *class* of choices (autotune.search.members) is bounded by its representative, priced once
   per submesh size at the smallest data-parallel degree and shared by every degree: first as a
   bare stage (no embedding, head or sends: one cost-model call); its floor is tightened, only
   when it comes up, by the representative's own times at each position with its leanest
   members' memory, and then by each way of recomputing (autotune.search.screens), each back in
   line where that raises it;
2. a class that may win is priced at the slice's degree: each member, and every partial
   recomputation count, gets its exact floor (memory-aware: a stage must hold one micro-batch);
3. a member that may win is solved by the stage DP (autotune.search.inter_op).

The 1F1B winner is the least DP objective (ties to the lower rank); interleaved layouts of the
members that may beat it are then scored by the cost model (autotune.cost.evaluate), a pass
of its own (autotune.search.interleaved). With ``method = "exhaustive"`` every class is priced
at every degree (no shared floors): the two agree wherever the floors hold, which the agreement
tests and scripts/bench_space.py check.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import replace

import numpy as np

from autotune.plan.plan import Plan
from autotune.search.assemble import _plan
from autotune.search.choices import StageChoice
from autotune.search.inter_op import PipelineSolution, solve_pipeline
from autotune.search.interleaved import best_interleaved
from autotune.search.heap_items import Counts
from autotune.search.member_floors import MemberFloors
from autotune.search.members import Member
from autotune.search.screens import Screens, price_positions
from autotune.search.tables import ChoiceCosts, best_by_inflight, stage_plan_of

__all__ = ["UniformSearch"]

# A round of screens priced once a plan is known (prefetch_below) goes to worker processes from
# this many: forking two costs about 35 ms of wall time and a memory screen about 3 ms
# (DeepSeek-V3 on 2048 GPUs, this 2-core machine), so fewer save less than the fork costs.
MIN_ROUND_TABLES = 32

# how much a class's floor on a slice knows: its representative's bare stage's times, then its
# times at each position and the leanest members' memory, then each way of recomputing
# (autotune.search.screens)
_TIMES, _MEMORY, _REFINED = range(3)


class UniformSearch:
    """Branch and bound over one slice at a time, sharing priced tables between slices (and,
    through ``cache``, between GPU counts)."""

    def __init__(self, search) -> None:
        self.search, self.problem = search, search.problem
        self.screens = Screens(search)
        self.num_layers = self.problem.model.num_layers
        self.exhaustive = self.problem.method == "exhaustive"
        self._priced: dict[tuple, dict[int, ChoiceCosts]] = {}
        self._items: dict = {}  # by slice: its candidates' floors, until it is solved
        self._time_only: dict = {}  # by (slice, submesh, class): its floors from its bare stage's times
        self._time_only_of: dict = {}  # by slice: its keys in _time_only (dropped when it is solved)
        self._memory: dict = {}  # by (slice, submesh): its classes' floors with memory, as they are made
        self.studies: set[tuple[int, int]] = set()
        self.member_floors = MemberFloors(self)
        self.num_evaluated = 0

    def _shape(self, key, stages: int, chunks: int) -> tuple[int, int, int, int, int]:
        """(layers, stages, micro-batches, chunks, micro-batches an interleaved stage holds) of a pipeline."""
        num_mb = self.problem.workload.global_batch // (key.dp * key.micro_batch)
        return self.num_layers, stages, num_mb, chunks, min(num_mb, stages, self.problem.space.max_stages)

    # -- a class priced at the slice's degree --------------------------------------------
    def members(self, dp: int, mp: int, stages: int, rep: StageChoice) -> dict[int, ChoiceCosts]:
        """Every member of the class priced at ``dp`` (and the no-recomputation twins its counts
        need, at index -1 - i for member i), by enumeration index."""
        key = (dp, mp, rep)
        found = self._priced.get(key)
        if found is None:
            positions, screens = price_positions(stages), self.screens
            cls = screens.classes(dp, mp)[rep]
            found = {i: screens.price_member(dp, mp, c, positions) for i, c in cls.members}
            if screens.counts[(dp, mp)]:
                by_choice = {c: found[i] for i, c in cls.members}
                for i, c in cls.members:
                    if c.recompute == "full":
                        twin = replace(c, recompute="none")
                        found[-1 - i] = by_choice.get(twin) or screens.price_member(dp, mp, twin, positions)
            self._priced[key] = found
            self.studies.add((dp, mp))
        return found

    def _member_items(self, key, mi: int, mp: int, stages: int, rep: StageChoice, chunks: int, side: int | None = None):
        """(1F1B floor, interleaved floor, rank, payload) of every member and count of a class;
        ``side`` 0 or 1: only that floor is made (the other NaN), for a heap of one schedule, and a
        member's counts come as one Counts item at their least floor (most are never taken)."""
        priced = self.members(key.dp, mp, stages, rep)
        counts = self.screens.counts[(key.dp, mp)]
        members = self.screens.classes(key.dp, mp)[rep].members
        fulls = [i for i, choice in members if choice.recompute == "full"] if counts else []
        plains, inters, by_full = self.member_floors.floors(key, mp, stages, rep, chunks, side)
        by_full = dict(zip(fulls, by_full))
        for (i, _), plain, inter in zip(members, plains.tolist(), inters.tolist()):
            yield plain, inter, (mi, i, 0), (priced[i], None, 0)
            if i in by_full:
                floors = by_full[i]
                items = Counts(mi, i, priced[i], priced[-1 - i], counts, floors[0].tolist(), floors[1].tolist())
                if side is not None and not np.isnan(floors[side]).any():
                    least = float(floors[side].min())
                    yield least, least, (mi, i, 0), items
                    continue
                yield from items.items()

    # -- solving a slice -------------------------------------------------------------------
    def _slice_items(self, key) -> list[tuple]:
        """(1F1B floor, interleaved floor, kind, rank, payload) of the slice's classes (kind 0,
        default method) or of every member (kind 1, exhaustive); made once per slice."""
        found = self._items.get(key)
        if found is None:
            found = []
            for mi, (mp, stages) in enumerate(self.screens.submeshes(key.dp)):
                chunks = self._chunks(key, stages)
                classes = self.screens.classes(key.dp, mp)
                if self.exhaustive:
                    found += [(plain, inter, 1, rank, (mp, stages, spec)) for rep in classes for plain, inter, rank, spec
                              in self._member_items(key, mi, mp, stages, rep, chunks)]
                    continue
                floors = self._class_time_floors(key, mp, stages, list(classes))
                found += [(plain, inter, 0, (mi, cls.members[0][0], 0), (mi, mp, stages, rep, _TIMES, (plain, inter)))
                          for (rep, cls), (plain, inter) in zip(classes.items(), floors)]
            self._items[key] = found
        return found

    def _candidates(self, key, interleaved: bool):
        """A heap of (floor, kind, rank, tie, payload) over the slice's items, and its tie counter."""
        tie = itertools.count()
        items = [(inter if interleaved else plain, kind, rank, next(tie), payload)
                 for plain, inter, kind, rank, payload in self._slice_items(key)]
        heapq.heapify(items)
        return items, tie

    def _class_time_floors(self, key, mp: int, stages: int, reps: list[StageChoice]) -> list[tuple[float, float]]:
        """The classes' floors from their bare stages' times (kept from coarse_bounds_s when it made
        them): a class's time and memory screens are priced only when it comes up (_expand)."""
        kept = [self._time_only.get((key, mp, rep)) for rep in reps]
        if all(pair is not None for pair in kept):
            return kept
        shape = self._shape(key, stages, self._chunks(key, stages))
        return self.screens.class_floors(key, mp, reps, shape, memory=False, bare=True)

    def lower_bound_s(self, key, cap: float = math.inf) -> tuple[float, bool]:
        """(bound, whole): no plan of the slice is faster than bound, the least floor of its
        candidates with memory included when ``whole``. Classes are taken in order of their floors
        from their bare stages, and a class's time and memory screens are priced only while that
        floor is below the least found so far (the same bound, with the screens of classes that
        cannot set it left unpriced) and not above ``cap``: past it the bound is that floor (above
        ``cap``, not whole), and a later call with a higher cap goes on from there (the classes
        priced stay priced)."""
        items = self._slice_items(key)
        if self.exhaustive:
            return min((min(item[0], item[1]) for item in items), default=math.inf), True
        least = math.inf
        floors = [min(item[0], item[1]) for item in items]
        for j in sorted(range(len(items)), key=floors.__getitem__):
            floor = floors[j]
            if floor >= least:
                break
            if floor > cap:  # every class left floors at least this: enough to put the slice back in line
                return floor, False
            if items[j][4][4] == _TIMES:
                items[j] = self._with_memory(key, items[j])
            least = min(least, items[j][0], items[j][1])
        return least, True

    def prefetch_below(self, keys, best_s: float) -> None:
        """Once a plan of step ``best_s`` is known: the screens the slices ``keys`` will still ask
        for, made in worker processes where that pays (autotune.search.parallel): the time and
        memory screens of every class whose bare stage's floor is below ``best_s``, then (their
        floors with memory made with them) the refined floors of those that memory raised but
        left below it, a class's screens and floors on every slice in one task. A class above
        ``best_s`` never comes up; one below may not either (a better plan or its slice's bound may
        stop it first): the workers price a few more than the search uses. Without workers,
        nothing is made ahead."""
        from autotune.search.parallel import usable

        screens, open_keys = self.screens, set(keys)
        classes = {(mp, rep) for (key, mp, rep), pair in self._time_only.items()  # bare floors below best_s
                   if key in open_keys and min(pair) < best_s and not screens.has_memory_screen(mp, rep)}
        tasks = [t for mp, rep in classes for t in screens._screen_tasks(mp, rep) + screens._memory_tasks(mp, rep)]
        if self.exhaustive or len(tasks) < MIN_ROUND_TABLES or not usable() or not screens.prefetch_tasks(tasks, MIN_ROUND_TABLES):
            return  # no workers (or too few tables for them): each class's floors are made if it comes up
        below = [(key, j) for key in keys for j, item in enumerate(self._slice_items(key))
                 if item[2] == 0 and item[4][4] == _TIMES and min(item[0], item[1]) < best_s]
        groups: dict[tuple, list] = {}  # a slice's classes on one submesh: their floors made at once
        for key, j in below:
            groups.setdefault((key, self._items[key][j][4][1]), []).append(self._items[key][j][4])
        for (key, mp), payloads in groups.items():
            reps = [payload[3] for payload in payloads]
            self._memory_floors(key, mp, payloads[0][2], reps), self._time_floors(key, mp, payloads[0][2], reps)
        refine: dict[tuple, list] = {}  # (submesh, class) -> its (slice, item index) to refine
        for key, j in below:
            item = self._items[key][j] = self._with_memory(key, self._items[key][j])
            plain, inter, _, _, (_, mp, stages, rep, _, _) = item
            times = self._time_floors(key, mp, stages, [rep])[rep]
            if times[0] < plain < best_s or times[1] < inter < best_s:  # _expand would refine it
                refine.setdefault((mp, rep), []).append((key, j))
        self._refine_in_workers(refine)

    def _refine_in_workers(self, refine: dict[tuple, list]) -> None:
        """refined_floor of each class on its slices (``refine``: (submesh, class) -> (slice, item
        index)), a class a task in worker processes where there are MIN_ROUND_TABLES or more; the
        items take them (state _REFINED: _expand prices their members next), the search counts
        the tables the workers priced for them."""
        from autotune.search.parallel import price_tables

        tasks = {("refine", mp, rep, tuple((key, self._shape(key, *self._stages_chunks(key, j))) for key, j in slices)):
                 slices for (mp, rep), slices in refine.items()}
        for task, (floors, trials) in price_tables(self.search, list(tasks), MIN_ROUND_TABLES).items():
            self.search.num_trials += trials
            for key, j in tasks[task]:
                plain, inter, kind, rank, (mi, mp, stages, rep, _, bare) = self._items[key][j]
                self._items[key][j] = (max(plain, floors[key][0]), max(inter, floors[key][1]), kind, rank,
                                       (mi, mp, stages, rep, _REFINED, bare))

    def _stages_chunks(self, key, j: int) -> tuple[int, int]:
        stages = self._items[key][j][4][2]
        return stages, self._chunks(key, stages)

    def _with_memory(self, key, item: tuple) -> tuple:
        """A class's item with its floors from its time screen and its leanest members' memory
        (state _MEMORY; the payload keeps its bare stage's floors)."""
        _, _, kind, rank, (mi, mp, stages, rep, _, bare) = item
        plain, inter = self._memory_floors(key, mp, stages, [rep])[rep]
        return max(plain, bare[0]), max(inter, bare[1]), kind, rank, (mi, mp, stages, rep, _MEMORY, bare)

    def _memory_floors(self, key, mp: int, stages: int, reps: list[StageChoice]) -> dict:
        """class_floors with memory of ``reps`` on the slice, kept until the slice is solved (by
        class); from the submesh's second call on, made with those of every class whose memory
        screen is priced already (one call for all: the same floors row by row; a slice asking
        once or twice makes only its own)."""
        memo = self._memory.setdefault((key, mp), {})
        if any(rep not in memo for rep in reps):
            ready = [r for r in self.screens.classes(key.dp, mp) if r not in memo and self.screens.has_memory_screen(mp, r)
                     ] if memo else []
            ready += [rep for rep in dict.fromkeys(reps) if rep not in memo and rep not in ready]
            shape = self._shape(key, stages, self._chunks(key, stages))
            memo.update(zip(ready, self.screens.class_floors(key, mp, ready, shape, memory=True)))
        return memo

    def _time_floors(self, key, mp: int, stages: int, reps: list[StageChoice]) -> dict:
        """class_floors of ``reps`` on the slice from their time screens alone (whether memory binds
        a class: above them), kept until the slice is solved (by class)."""
        memo = self._memory.setdefault((key, mp, "times"), {})
        missing = [rep for rep in dict.fromkeys(reps) if rep not in memo]
        if missing:
            shape = self._shape(key, stages, self._chunks(key, stages))
            memo.update(zip(missing, self.screens.class_floors(key, mp, missing, shape, memory=False)))
        return memo

    def coarse_bounds_s(self, keys) -> list[float]:
        """Floors of lower_bound_s of the slices ``keys`` from the classes' bare stages' times (no
        time or memory screens priced), a degree's slices at once; the exhaustive method's are the
        exact ones."""
        if self.exhaustive:
            return [self.lower_bound_s(key)[0] for key in keys]
        least = dict.fromkeys(keys, math.inf)
        for dp in dict.fromkeys(key.dp for key in keys):
            slices = [key for key in keys if key.dp == dp]
            for mp, stages in self.screens.submeshes(dp):
                classes = list(self.screens.classes(dp, mp))
                shapes = [(key, self._shape(key, stages, self._chunks(key, stages))) for key in slices]
                for key, pairs in zip(slices, self.screens.bare_class_floors(shapes, mp, classes)):
                    for rep, pair in zip(classes, pairs):
                        self._time_only[(key, mp, rep)] = pair
                        self._time_only_of.setdefault(key, []).append((key, mp, rep))
                        least[key] = min(least[key], min(pair))
        return [least[key] for key in keys]

    def _chunks(self, key, stages: int) -> int:
        """The most chunks per rank an interleaved layout of ``stages`` equal stages may take (1: none)."""
        L, num_mb = self.num_layers, self.problem.workload.global_batch // (key.dp * key.micro_batch)
        if stages < 2 or L % stages or num_mb % stages:
            return 1
        return max([v for v in self.problem.space.vpp if v > 1 and (L // stages) % v == 0], default=1)

    def solve(self, key, prune_above: float = math.inf):
        """The slice's best plan and estimate: 1F1B by the DP, then interleaved layouts."""
        best = self._best_pipeline(key, prune_above)
        plan = estimate = None
        if best is not None:
            plan = self._plan_of(key, best)
            estimate = self.search.evaluate(plan)
            self.num_evaluated += 1
        found = best_interleaved(self, key, prune_above, plan, estimate)
        self._items.pop(key, None)
        self.member_floors.forget(key)
        for kept, done in [(self._time_only, k) for k in self._time_only_of.pop(key, ())] + [
                (self._memory, k) for k in self._memory if k[0] == key]:
            kept.pop(done, None)
        return found

    def _expand(self, key, heap, tie, item, interleaved: bool) -> None:
        """A class taken from the heap: first its floor per way of recomputing (back in line if
        that is higher), then its members priced at the slice's degree."""
        floor, _, rank, _, payload = item
        mi, mp, stages, rep, known, bare = payload
        chunks = self._chunks(key, stages)
        shape = self._shape(key, stages, chunks)
        side = 1 if interleaved else 0
        if known == _TIMES:  # the leanest members' memory screens, priced now that the class may win
            plain, inter, _, _, payload = self._with_memory(key, (floor, floor, 0, rank, payload))
            better = inter if interleaved else plain
            if better > floor:
                heapq.heappush(heap, (better, 0, rank, next(tie), payload))
                return
        elif known == _MEMORY and floor > bare[side] and floor > self._time_floors(key, mp, stages, [rep])[rep][side]:
            # memory binds even the leanest members: worth four screens
            better = self.screens.refined_floor(key, mp, rep, shape)[side]
            if better > floor:
                heapq.heappush(heap, (better, 0, rank, next(tie), (mi, mp, stages, rep, _REFINED, bare)))
                return
        for plain, inter, rank, member in self._member_items(key, mi, mp, stages, rep, chunks, side):
            heapq.heappush(heap, (inter if interleaved else plain, 1, rank, next(tie), (mp, stages, member)))

    def _best_pipeline(self, key, prune_above: float):
        """min over members of the stage DP's objective, by branch and bound: (objective, rank,
        member, solution) or None; classes raised by their least step tail (autotune.search.tailed)
        where the method is the default."""
        if self.exhaustive:
            return self._best_pipeline_in_order(key, prune_above)
        from autotune.search.tailed import best_pipeline

        return best_pipeline(self, key, prune_above)

    def _best_pipeline_in_order(self, key, prune_above: float):
        """_best_pipeline taking classes at their floors without tails (the exhaustive method's)."""
        from autotune.search.tailed import in_order

        return in_order(self, key, prune_above)

    def _solve_member(self, key, member: Member, stages: int, at_most: float = math.inf) -> PipelineSolution | None:
        """The member's best 1F1B pipeline; None if nothing fits or nothing scores at most ``at_most``."""
        p = self.problem
        num_mb = p.workload.global_batch // (key.dp * key.micro_batch)
        units = p.gpus // key.dp
        most = min(p.space.max_stages, self.num_layers, units)
        b = self.search.micro_batches(key.dp).index(key.micro_batch)
        time, tail, _ = best_by_inflight([member.costs], b, num_mb, min(num_mb, most), self.search.capacity)
        return solve_pipeline(time[None], tail[None], np.array([member.model_parallel]), units, num_mb, most,
                              at_most=at_most)

    def _plan_of(self, key, best) -> Plan:
        _, _, member, solution = best
        L = self.num_layers
        stages = [stage_plan_of(member.costs.choice, key.dp, c.first_layer == 0, c.first_layer + c.num_layers == L,
                                (c.first_layer, c.first_layer + c.num_layers)) for c in solution.stages]
        return _plan(self.search, key, stages)
