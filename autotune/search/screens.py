"""What a uniform-stage search shares between slices, data-parallel degrees and GPU counts: the
classes of each (dp, submesh) study, priced tables, and each class's screen.

A class's screen (autotune.search.members) is two tables shared by every degree: its
representative's stage times priced at the smallest degree whose studies have the class (a
micro-batch's time does not fall as the degree grows), and the least memory of its leanest
members priced at the largest (memory does not grow with the degree), their memory alone (the
cost model's stage_memory: a few times cheaper than time and memory). A class's floor on a slice
comes from the times alone (``memory=False``: cheap, one table per class) or from both.

Before either, a class is bounded by its *bare* stage (members.bare_times: no embedding, head or
pipeline neighbour, read at every position), one cost-model call where the time screen's
positions take three or more: DeepSeek-V3 on 2048 GPUs prices its 294 classes' bare stages in
0.46 s of CPU against 1.8 s for their time screens, and 98 of them floor below the optimum on some
slice (97 by their time screens), so only those need the time screen.

Tables go through the plan cache (autotune.search.cache) when the search has one: a table
depends on the stage's submesh, degree, micro-batch sizes and positions, not on the GPU count,
so another GPU count of the same model, workload, runtime and space reuses it. Without one, the
search keeps its own (bounded) for the positions it prices twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autotune.search.cache import PlanCache
from autotune.search.choices import StageChoice, choice_values, enumerate_choices
from autotune.search.members import bare_times, lays_out, representative
from autotune.search.screen_floors import ScreenFloors
from autotune.search.screen_tasks import BASELINES
from autotune.search.tables import EITHER_LINK, FIRST, LAST, MIDDLE, POSITIONS, SINGLE, ChoiceCosts, choice_costs

__all__ = ["ChoiceClass", "Screens", "price_positions"]


@dataclass(frozen=True)
class ChoiceClass:
    """One class of a (dp, submesh) study: its representative and members (index, choice)."""

    rep: StageChoice
    members: tuple[tuple[int, StageChoice], ...]


def price_positions(num_stages: int) -> list[int]:
    """Positions priced for a study: the only stage, or first, last and middle (one set serves
    every pipeline depth of 2 or more, so other GPU counts reuse it)."""
    return [SINGLE] if num_stages == 1 else [FIRST, LAST, MIDDLE]


def _leanest(cls: ChoiceClass, recompute: str | None = None) -> list[StageChoice]:
    """The members (recomputing as ``recompute``, if given) that keep the least in HBM: the most
    recomputation and the highest ZeRO stage, with each offload (offloads move different things)."""
    choices = [c for _, c in cls.members if recompute is None or c.recompute == recompute]
    order = {"full": 0, "selective": 1, "selective_op": 1, "none": 2}
    least = min(order.get(c.recompute, 2) for c in choices)
    choices = [c for c in choices if order.get(c.recompute, 2) == least]
    top = max(c.zero for c in choices)
    return [c for c in choices if c.zero == top]


_LOCAL_TABLE_BYTES = 64 * 2**20  # a search's own priced positions, when it has no plan cache

# StagePlan fields that move tensors to host memory (cost/offload.py)
_OFFLOADING = ("optimizer_in", "gradients_in", "weights_in", "activations_in", "activation_offload_layers")

_FIELDS = ("time_s", "tail_s", "mem_base_bytes", "mem_per_microbatch_bytes")


@dataclass(frozen=True)
class _PositionTables:
    """One position's tables of a priced choice, [micro-batch, n] (cached on their own)."""

    time_s: np.ndarray
    tail_s: np.ndarray
    mem_base_bytes: np.ndarray
    mem_per_microbatch_bytes: np.ndarray

    @property
    def costs(self) -> tuple:  # what the plan cache counts the bytes of
        return (self,)


@dataclass(frozen=True)
class _Whole:
    """A priced choice's tables at every position asked for (the plan cache counts ``costs``' bytes)."""

    costs: tuple[ChoiceCosts]


class Screens(ScreenFloors):
    """Classes, priced tables and screens of one search problem (``search``: its SliceSearch)."""

    def __init__(self, search) -> None:
        self.search, self.problem = search, search.problem
        self.counts: dict[tuple[int, int], list[int]] = {}
        self._classes: dict[tuple[int, int], dict[StageChoice, ChoiceClass]] = {}
        self._time: dict[tuple, tuple[int, ChoiceCosts] | None] = {}
        self._bare: dict[tuple, tuple[int, ChoiceCosts] | None] = {}
        self._memory: dict[tuple, tuple[tuple[int, ...], np.ndarray, np.ndarray]] = {}
        self._where: dict[tuple[int, StageChoice], tuple[list[int], list[int]]] = {}
        self._made: dict[tuple, ChoiceCosts] = {}  # tables worker processes made, until priced
        self._enumerated: dict[tuple, tuple] = {}  # _enumerate by (submesh, choice values)
        self._submeshes: dict[int, list[tuple[int, int]]] = {}  # submeshes by degree (read, never changed)
        # priced positions when the search has no plan cache: members at the smallest degree with
        # their class repeat its screens' positions, a leanest member another's (about 1 in 9 in
        # DeepSeek-V3 on 2048 GPUs); bounded as the plan cache's tables are
        self._tables = PlanCache(max_results=0, max_study_bytes=_LOCAL_TABLE_BYTES)
        self._floors: dict[tuple, dict] = {}  # class_floors by (slice, submesh, shape, memory): by class
        self._tasks: dict[tuple, list[tuple]] = {}  # _screen_tasks, _memory_tasks: asked per slice and class
        # screens_ready's "no" by class, with the price calls it saw of each (submesh, choice) its
        # tasks price: a class's tables are stored (and workers' made ones taken) only by price
        # calls of its tasks' choices, so until one of those its "no" stays (asked for each class on
        # every class_floors; a count of all price calls sent 3 in 4 of DeepSeek-V3/2048's 11,135
        # asks to the full check). Workers' tables (prefetch_tasks) only make a class less ready.
        self._prices: dict[tuple[int, StageChoice], int] = {}
        self._unready: dict[tuple, tuple] = {}

    def dps(self) -> list[int]:
        return sorted({k.dp for k in self.search.keys})

    def submeshes(self, dp: int) -> list[tuple[int, int]]:
        """(model-parallel size, stages) of the slice's pipelines: stages of equal submeshes."""
        found = self._submeshes.get(dp)  # asked per slice and class
        if found is None:
            units = self.problem.gpus // dp
            most = min(self.problem.space.max_stages, self.problem.model.num_layers, units)
            found = self._submeshes[dp] = [(m, units // m) for m in self.search.stage_sizes(dp)
                                           if units % m == 0 and units // m <= most]
        return found

    def classes(self, dp: int, mp: int) -> dict[StageChoice, ChoiceClass]:
        """The study's choices by class (enumerated, not priced); its counts go to ``counts``."""
        found = self._classes.get((dp, mp))
        if found is None:
            cache = self.search.cache
            key = (self.search.base_key, "classes", dp, mp) if cache is not None else None
            made = cache.study(key) if key is not None else None
            if made is None:
                made = self._enumerate(dp, mp)
                if key is not None:
                    cache.store_study(key, made)
            found, self.counts[(dp, mp)] = made
            self._classes[(dp, mp)] = found
        return found

    def _enumerate(self, dp: int, mp: int) -> tuple[dict[StageChoice, ChoiceClass], list[int]]:
        """The study's classes and counts, from its choice values: degrees whose values are the same
        (they differ only where ZeRO, mesh orders, expert or HSDP degrees do) share one enumeration."""
        p = self.problem
        values = choice_values(p.space, p.model, p.workload, p.cluster, mp, dp)
        key = (mp, tuple((name, tuple(v)) for name, v in values.items()))
        if key not in self._enumerated:
            counts = [k for k in values.pop("recompute_layers", []) if k > 0]
            groups: dict[StageChoice, list] = {}
            for i, choice in enumerate(enumerate_choices(p.space, mp, values)):
                groups.setdefault(representative(choice), []).append((i, choice))
            self._enumerated[key] = {rep: ChoiceClass(rep, tuple(m)) for rep, m in groups.items()}, counts
        return self._enumerated[key]

    def price(self, dp: int, mp: int, choice: StageChoice, positions: list[int], kind: str,
              sizes: tuple[int, ...] | None = None, inter_node: bool | None = None) -> ChoiceCosts:
        """choice_costs through the plan cache, a position at a time (another pipeline depth or
        GPU count needing some of the same positions reuses them); ``sizes``: micro-batch sizes
        other than the degree's own; ``inter_node`` as choice_costs. ``kind`` names what the
        tables are for (screens, leanest members, members), not part of what they are, except
        that a leanest member's ("lean") are its memory alone (choice_costs memory_only)."""
        memory_only = kind == "lean"
        self._prices[(mp, choice)] = self._prices.get((mp, choice), 0) + 1
        made = self._made.pop(("lean" if memory_only else "time", dp, mp, choice, tuple(positions), sizes, inter_node), None)
        cache, base = self._cache()
        tables = "memory" if memory_only else "position"
        micro_batches = self.search.micro_batches(dp) if sizes is None else sizes
        # the positions' tables laid out as one ChoiceCosts, kept beside them: another GPU count
        # asks for the same (degree, submesh, choice, positions) as a whole
        whole = (base, tables + "s", dp, mp, micro_batches, inter_node, choice, tuple(positions))
        if (kept := cache.study(whole)) is not None:
            return kept.costs[0]
        ctx = self.search._slice_context(dp)
        if sizes is not None:
            ctx = replace(ctx, micro_batches=sizes)
        keys = {pos: (base, tables, dp, mp, ctx.micro_batches, inter_node, choice, pos) for pos in positions}
        found = {pos: cache.study(key) for pos, key in keys.items()}
        missing = [pos for pos, value in found.items() if value is None]
        if missing:
            made = made if made is not None else choice_costs(ctx, choice, missing, inter_node, memory_only)
            self.search.num_trials += 1
            for pos in missing:
                found[pos] = _PositionTables(*(getattr(made, name)[:, :, pos].copy() for name in _FIELDS))
                cache.store_study(keys[pos], found[pos])
        shape = (len(ctx.micro_batches), self.problem.model.num_layers + 1, 4)
        arrays = {name: np.full(shape, np.inf) for name in _FIELDS}
        for pos, tables in found.items():
            for name in _FIELDS:
                arrays[name][:, :, pos] = getattr(tables, name)
        out = ChoiceCosts(choice=choice, **arrays)
        cache.store_study(whole, _Whole((out,)))
        return out

    def bare_screen(self, mp: int, rep: StageChoice) -> tuple[int, ChoiceCosts] | None:
        """(degree, tables) as time_screen's, of the representative's bare stage (bare_times at
        every position; the tail and memory NaN: not priced), through the plan cache."""
        if (mp, rep) not in self._bare:
            found = None
            for _, dp, _, choice in self._bare_tasks(mp, rep):
                made = self._made.pop(("bare", dp, mp, choice), None)
                cache, base = self._cache()
                found = cache.study(cache_key := (base, "bare", dp, mp, self.search.micro_batches(dp), choice))
                if found is None:
                    time = made if made is not None else bare_times(self.search._slice_context(dp), choice)
                    self.search.num_trials += 1
                    shape = time.shape + (len(POSITIONS),)
                    unpriced = np.broadcast_to(np.nan, shape)
                    found = _Whole((ChoiceCosts(choice=choice, time_s=np.broadcast_to(time[..., None], shape),
                                                tail_s=unpriced, mem_base_bytes=unpriced, mem_per_microbatch_bytes=unpriced),))
                    cache.store_study(cache_key, found)
                found = (dp, found.costs[0])
            self._bare[(mp, rep)] = found
        return self._bare[(mp, rep)]

    def _cache(self) -> tuple[PlanCache, object]:
        """(cache, base key) of priced tables: the plan cache, or without one this search's own."""
        return (self.search.cache, self.search.base_key) if self.search.cache is not None else (self._tables, None)

    def compute(self, task: tuple):
        """What a worker process makes of a price task (autotune.search.screen_tasks)."""
        from autotune.search.screen_tasks import compute

        return compute(self, task)

    def prefetch(self, keys) -> None:
        """Make the screens every slice's coarse bound reads in worker processes where that pays
        (autotune.search.parallel): every class's bare stage. Time and memory screens are left to
        the classes that come up (autotune.search.uniform)."""
        wanted: dict[tuple, None] = dict.fromkeys([BASELINES] if self.search.with_baselines else [])  # first: the longest
        for dp in sorted({key.dp for key in keys}):
            for mp, _ in self.submeshes(dp):
                for rep in self.classes(dp, mp):
                    wanted.update(dict.fromkeys(self._bare_tasks(mp, rep)))
        self.prefetch_tasks(list(wanted))
        self.search.baselines = self._made.pop(BASELINES, None)  # scored by a worker where the tables were

    def prefetch_tasks(self, tasks: list[tuple], least: int | None = None) -> bool:
        """Price tasks (_bare_tasks, _screen_tasks, _memory_tasks) made in worker processes where
        there are at least ``least`` (None: parallel.MIN_TABLES) not priced yet; bare_screen and
        price take them from there when asked (and count them then: the search's trials are the
        tables it uses). Whether workers made them."""
        from autotune.search.parallel import price_tables

        made = price_tables(self.search, [t for t in tasks if t not in self._made and not self._is_priced(t)], least)
        self._made.update(made)
        return bool(made)

    def _is_priced(self, task: tuple) -> bool:
        """Whether a price task's tables are in the cache already (another GPU count's, or this
        search's): bare_screen and price then read them without pricing (nor counting) a table."""
        if task == BASELINES:
            return False
        cache, base = self._cache()
        if task[0] == "bare":
            return cache.study((base, "bare", task[1], task[2], self.search.micro_batches(task[1]), task[3])) is not None
        kind, dp, mp, choice, positions, sizes, link = task
        tables, sizes = ("memory", sizes) if kind == "lean" else ("position", self.search.micro_batches(dp))
        return all(cache.study((base, tables, dp, mp, sizes, link, choice, pos)) is not None for pos in positions)

    def screens_ready(self, mp: int, rep: StageChoice, memory: bool) -> bool:
        """Whether the class's time screen (and with ``memory`` its memory screen) is made, or can
        be made from cached tables alone (no table priced: a warm process's other GPU counts priced
        them; a class without a degree has none to make). Only which floors class_floors makes in
        one pass reads it, never what they are."""
        made = (mp, rep, "none") in self._time and (not memory or (mp, rep, None) in self._memory)
        if made or not self._degrees(mp, rep)[0]:
            return made
        prices = self._prices
        seen = self._unready.get(key := (mp, rep, memory))
        if seen is not None and all(prices.get(pair, 0) == count for pair, count in seen):
            return False
        tasks = self._screen_tasks(mp, rep) + (self._memory_tasks(mp, rep) if memory else [])
        ready = not any(task in self._made for task in tasks) and all(self._is_priced(task) for task in tasks)
        if not ready:
            self._unready[key] = tuple((pair, prices.get(pair, 0)) for pair in {(t[2], t[3]): None for t in tasks})
        return ready

    def _bare_tasks(self, mp: int, rep: StageChoice) -> list[tuple]:
        """bare_screen's pricing of a class, if it has a degree."""
        dps, _ = self._degrees(mp, rep)
        return [("bare", dps[0], mp, rep)] if dps else []

    def _screen_tasks(self, mp: int, rep: StageChoice, recompute: str = "none") -> list[tuple]:
        """The price calls of a class's time screen (as time_screen makes them)."""
        found = self._tasks.get(key := ("time", mp, rep, recompute))
        if found is None:  # from the class's degrees and links, made once and never changed
            dps, positions = self._degrees(mp, rep)
            choice = replace(rep, recompute=recompute) if dps else None
            found = self._tasks[key] = [("time", dps[0], mp, choice, tuple(positions), None, link)
                                        for link in (self._links(mp, rep, dps) if dps else [])]
        return found

    def _memory_tasks(self, mp: int, rep: StageChoice, recompute: str | None = None) -> list[tuple]:
        """The price calls of a class's memory screen (as memory_screen makes them)."""
        found = self._tasks.get(key := ("lean", mp, rep, recompute))
        if found is None:
            dps, positions = self._degrees(mp, rep)
            sizes = tuple(sorted({b for dp in dps for b in self.search.micro_batches(dp)}))
            found = self._tasks[key] = [("lean", dps[-1], mp, c, tuple(positions), sizes, None)
                                        for c in _leanest(self.classes(dps[-1], mp)[rep], recompute)]
        return found

    def _links(self, mp: int, rep: StageChoice, dps: list[int]) -> list[bool | str | None]:
        """How a time screen prices pipeline sends (choice_costs inter_node), one table each: as its
        degree's stages send, or, where the degrees' stages send both inside a node and across
        nodes (sends_both_links), by the faster link (or both links, for a stage that offloads:
        its offload may read the send time)."""
        if len({mp * dp >= self.problem.cluster.gpus_per_node for dp in dps}) == 1 and not any(
                self.sends_both_links(mp * dp) for dp in dps):
            return [None]
        return [None, True] if any(k in _OFFLOADING for k, _ in rep.placements) else [EITHER_LINK]

    def sends_both_links(self, stage_gpus: int) -> bool:
        """Whether the stages of ``stage_gpus`` GPUs, less than a node, make pipelines over several
        nodes: laid out in order (cost/plan_common.stage_positions), a stage whose neighbour starts
        in another node sends across nodes and the others within one, and choice_costs prices
        every send within one (an overlapped send across nodes can cost less: autotune.cost.stage
        _p2p_s, its contention share)."""
        return stage_gpus < self.problem.cluster.gpus_per_node < self.problem.gpus

    def price_member(self, dp: int, mp: int, choice: StageChoice, positions: list[int]) -> ChoiceCosts:
        """A member's tables at ``dp`` (price, "member"): where its stages send over both links
        (sends_both_links), by the faster link, a floor on every stage's time (one that offloads,
        whose offload may read the send time, priced at both links and the lesser of each entry
        taken), so that no member's DP objective or floor is above a plan's estimate."""
        tables = [self.price(dp, mp, choice, positions, "member", inter_node=link)
                  for link in self._member_links(dp, mp, choice)]
        return tables[0] if len(tables) == 1 else replace(tables[0], **{
            name: np.fmin.reduce([getattr(t, name) for t in tables]) for name in _FIELDS})

    def _member_links(self, dp: int, mp: int, choice: StageChoice) -> list[bool | str | None]:
        if not self.sends_both_links(mp * dp):
            return [None]
        return [None, True] if any(k in _OFFLOADING for k, _ in choice.placements) else [EITHER_LINK]

    def member_priced(self, dp: int, mp: int, choice: StageChoice, positions: tuple[int, ...]) -> bool:
        """Whether price_member(dp, mp, choice, positions) is in the plan cache already."""
        cache, base = self._cache()
        sizes = self.search.micro_batches(dp)
        return all(cache.study((base, "positions", dp, mp, sizes, link, choice, positions)) is not None
                   for link in self._member_links(dp, mp, choice))

    def _degrees(self, mp: int, rep: StageChoice) -> tuple[list[int], list[int]]:
        """(degrees whose studies have the class and whose stages can take it, positions their
        pipelines take). A class whose expert degrees (ep x etp) do not divide a stage of the
        smallest degree does divide larger ones: its screens start where it can be laid out (else
        that degree's inf tables would floor it out of every degree)."""
        found = self._where.get((mp, rep))
        if found is None:
            dps = [dp for dp in self.dps() if any(m == mp for m, _ in self.submeshes(dp)) and rep in self.classes(dp, mp)]
            # from the smallest and the largest that lay it out (those between add positions and sizes at most)
            low = next((i for i, dp in enumerate(dps) if lays_out(rep, dp)), len(dps))
            high = next((i for i in range(len(dps) - 1, low - 1, -1) if lays_out(rep, dps[i])), low - 1)
            dps = dps[low:high + 1]
            stages = {s for dp in dps for m, s in self.submeshes(dp) if m == mp}
            found = self._where[(mp, rep)] = (dps, sorted({x for s in stages for x in price_positions(s)}))
        return found

    def time_screen(self, mp: int, rep: StageChoice, recompute: str = "none") -> tuple[int, ChoiceCosts] | None:
        """(degree, tables) of the representative (with ``recompute``: the floor of the class's
        members that recompute so) at the smallest degree with the class. Pipeline sends inside
        a node and across nodes are priced differently, neither always the faster: where the
        degrees' stages do both, the screen takes the lesser time of each."""
        key = (mp, rep, recompute)
        if key not in self._time:
            found = None
            tasks = self._screen_tasks(mp, rep, recompute)
            if tasks:
                tables = [self.price(dp, mp, choice, list(positions), "screen", inter_node=link)
                          for _, dp, mp, choice, positions, _, link in tasks]
                found = (tasks[0][1], replace(tables[0], time_s=np.fmin.reduce([t.time_s for t in tables])))
            self._time[key] = found
        return self._time[key]

    def has_memory_screen(self, mp: int, rep: StageChoice) -> bool:
        """Whether memory_screen(mp, rep) is made already."""
        return (mp, rep, None) in self._memory

    def memory_screen(self, mp: int, rep: StageChoice,
                      recompute: str | None = None) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
        """(micro-batch sizes, base, per-micro-batch bytes): the least memory of the class's leanest
        members (of those recomputing as ``recompute``, if given) at the largest degree with the
        class, for every size any degree has."""
        key = (mp, rep, recompute)
        if key not in self._memory:
            tasks = self._memory_tasks(mp, rep, recompute)
            sizes = tasks[0][5]
            lean = [self.price(dp, mp, c, list(positions), "lean", sizes) for _, dp, mp, c, positions, *_ in tasks]
            self._memory[key] = (sizes, np.minimum.reduce([c.mem_base_bytes for c in lean]),
                                 np.minimum.reduce([c.mem_per_microbatch_bytes for c in lean]))
        return self._memory[key]
