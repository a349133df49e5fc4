"""Spaces whose stages share one choice (Megatron-LM, torchtitan and DeepSpeed configs): each
slice solved exactly by branch and bound over (submesh, choice), pricing only what may win.

Within a slice (dp, micro-batch) a plan is a submesh size, one stage choice and a cut of the
layers (1F1B, by the stage DP), or equal stages interleaved. Candidates are taken in order of a
floor on their step (autotune.search.bounds) and a slice stops when no floor beats its best:

1. a *class* of choices (autotune.search.members) is bounded by its representative, priced once
   per submesh size at the smallest data-parallel degree and shared by every degree;
2. a class that may win is priced at the slice's degree: each member, and every partial
   recomputation count, gets its exact floor (memory-aware: a stage must hold one micro-batch);
3. a member that may win is solved by the stage DP (autotune.search.inter_op).

The 1F1B winner is the least DP objective (ties to the lower rank); interleaved layouts of the
members that may beat it are then scored by the cost model (autotune.cost.evaluate). With
``method = "exhaustive"`` every class is priced at every degree (no shared floors): the two
agree wherever the floors hold, which the agreement tests and scripts/bench_space.py check.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from autotune.plan.plan import Plan
from autotune.search.assemble import _plan
from autotune.search.bounds import positions_of
from autotune.search.choices import StageChoice, choice_values, enumerate_choices
from autotune.search.inter_op import PipelineSolution, solve_pipeline
from autotune.search.members import Member, count_costs, count_floors, member_floors, representative
from autotune.search.tables import FIRST, LAST, MIDDLE, SINGLE, ChoiceCosts, best_by_inflight, choice_costs

__all__ = ["UniformSearch"]


@dataclass(frozen=True)
class _Class:
    """One class of a (dp, submesh) study: its representative and members (index, choice)."""

    rep: StageChoice
    members: tuple[tuple[int, StageChoice], ...]


@dataclass(frozen=True, kw_only=True)
class _Screen:
    """A class's floor tables: the representative's times at ``time_dp``, the least memory of its
    leanest members at the largest degree (arrays [micro-batch in ``memory_sizes``, n, position])."""

    time_dp: int
    time: ChoiceCosts
    memory_sizes: tuple[int, ...]
    base: np.ndarray
    per: np.ndarray


def _leanest(cls: _Class) -> list[StageChoice]:
    """The members that keep the least in HBM: the most recomputation and the highest ZeRO stage,
    with each offload the class has (offloads differ in what they move)."""
    choices = [c for _, c in cls.members]
    order = {"full": 0, "selective": 1, "selective_op": 1, "none": 2}
    least = min(order.get(c.recompute, 2) for c in choices)
    choices = [c for c in choices if order.get(c.recompute, 2) == least]
    top = max(c.zero for c in choices)
    return [c for c in choices if c.zero == top]


def _price_positions(num_stages: int) -> list[int]:
    """Positions priced for a study: the only stage, or first, last and middle (one set serves
    every pipeline depth of 2 or more, so other GPU counts reuse it)."""
    return [SINGLE] if num_stages == 1 else [FIRST, LAST, MIDDLE]


class UniformSearch:
    """Branch and bound over one slice at a time, sharing priced tables between slices (and,
    through ``cache``, between GPU counts)."""

    def __init__(self, search) -> None:
        self.search, self.problem = search, search.problem
        p = self.problem
        self.num_layers = p.model.num_layers
        self.exhaustive = p.method == "exhaustive"
        self.counts: dict[tuple[int, int], list[int]] = {}
        self._classes: dict[tuple[int, int], dict[StageChoice, _Class]] = {}
        self._priced: dict[tuple, dict[int, ChoiceCosts]] = {}
        self._screens: dict[tuple[int, StageChoice], _Screen | None] = {}
        self._items: dict = {}  # by slice: its candidates' floors, until it is solved
        self.studies: set[tuple[int, int]] = set()
        self.num_evaluated = 0

    # -- what a slice may use ------------------------------------------------------------
    def dps(self) -> list[int]:
        return sorted({k.dp for k in self.search.keys})

    def submeshes(self, dp: int) -> list[tuple[int, int]]:
        """(model-parallel size, stages) of the slice's pipelines: stages of equal submeshes."""
        units = self.problem.gpus // dp
        most = min(self.problem.space.max_stages, self.num_layers, units)
        return [(m, units // m) for m in self.search.stage_sizes(dp) if units % m == 0 and units // m <= most]

    def classes(self, dp: int, mp: int) -> dict[StageChoice, _Class]:
        """The study's choices by class (enumerated, not priced), and its recomputation counts."""
        found = self._classes.get((dp, mp))
        if found is None:
            p = self.problem
            values = choice_values(p.space, p.model, p.workload, p.cluster, mp, dp)
            self.counts[(dp, mp)] = [k for k in values.pop("recompute_layers", []) if k > 0]
            groups: dict[StageChoice, list] = {}
            for i, choice in enumerate(enumerate_choices(p.space, mp, values)):
                groups.setdefault(representative(choice), []).append((i, choice))
            found = self._classes[(dp, mp)] = {rep: _Class(rep, tuple(m)) for rep, m in groups.items()}
        return found

    # -- floors shared by every data-parallel degree --------------------------------------
    def screen(self, mp: int, rep: StageChoice) -> _Screen | None:
        """The class's floor tables shared by every degree: the representative's times at the
        smallest degree whose studies have the class, and the least memory of its leanest members
        (full recomputation, the highest ZeRO stage, each offload) at the largest (memory does not
        grow with the degree), at every position any degree's pipelines take."""
        key = (mp, rep)
        if key not in self._screens:
            dps = [dp for dp in self.dps() if any(m == mp for m, _ in self.submeshes(dp)) and rep in self.classes(dp, mp)]
            found = None
            if dps:
                stages = {s for dp in dps for m, s in self.submeshes(dp) if m == mp}
                positions = sorted({x for s in stages for x in _price_positions(s)})
                time = self._price(dps[0], mp, rep, positions, "screen")
                sizes = tuple(sorted({b for dp in dps for b in self.search.micro_batches(dp)}))
                lean = [self._price(dps[-1], mp, c, positions, "lean", sizes)
                        for c in _leanest(self.classes(dps[-1], mp)[rep])]
                found = _Screen(time_dp=dps[0], time=time, memory_sizes=sizes,
                                base=np.minimum.reduce([c.mem_base_bytes for c in lean]),
                                per=np.minimum.reduce([c.mem_per_microbatch_bytes for c in lean]))
            self._screens[key] = found
        return self._screens[key]

    def _price(self, dp: int, mp: int, choice: StageChoice, positions: list[int], kind: str,
               sizes: tuple[int, ...] | None = None) -> ChoiceCosts:
        """choice_costs through the plan cache (shared by GPU counts: the tables do not depend on
        them); ``sizes``: micro-batch sizes other than the degree's own."""
        cache, ctx = self.search.cache, self.search._slice_context(dp)
        if sizes is not None:
            ctx = replace(ctx, micro_batches=sizes)
        key = None
        if cache is not None:
            key = (self.search.base_key, kind, dp, mp, ctx.micro_batches, tuple(positions), choice)
            found = cache.study(key)
            if found is not None:
                return found
        costs = choice_costs(ctx, choice, positions)
        self.search.num_trials += 1
        if cache is not None:
            cache.store_study(key, costs)
        return costs

    def _class_floor(self, key, mp: int, stages: int, rep: StageChoice, chunks: int) -> tuple[float, float]:
        """(1F1B, interleaved) floors of a class from its screen (no member is faster nor needs less
        memory); 0 where the screen lacks this micro-batch size (the class is priced to know)."""
        found = self.screen(mp, rep)
        if found is None:
            return math.inf, math.inf
        time_sizes, memory_sizes = self.search.micro_batches(found.time_dp), found.memory_sizes
        if key.micro_batch not in time_sizes or key.micro_batch not in memory_sizes:
            return 0.0, 0.0
        b, m = time_sizes.index(key.micro_batch), memory_sizes.index(key.micro_batch)
        time = found.time.time_s[b][None]
        floors = ChoiceCosts(choice=rep, time_s=time, tail_s=np.zeros_like(time), mem_base_bytes=found.base[m][None],
                             mem_per_microbatch_bytes=found.per[m][None])
        return member_floors(floors, 0, self.search.capacity, self._shape(key, stages, chunks))

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
            positions = _price_positions(stages)
            cls = self.classes(dp, mp)[rep]
            found = {i: self._price(dp, mp, c, positions, "member") for i, c in cls.members}
            if self.counts[(dp, mp)]:
                by_choice = {c: found[i] for i, c in cls.members}
                for i, c in cls.members:
                    if c.recompute == "full":
                        twin = replace(c, recompute="none")
                        found[-1 - i] = by_choice.get(twin) or self._price(dp, mp, twin, positions, "member")
            self._priced[key] = found
            self.studies.add((dp, mp))
        return found

    def _member_items(self, key, mi: int, mp: int, stages: int, rep: StageChoice, chunks: int):
        """(1F1B floor, interleaved floor, rank, payload) of every member and count of a class."""
        priced = self.members(key.dp, mp, stages, rep)
        b = self.search.micro_batches(key.dp).index(key.micro_batch)
        cap, shape = self.search.capacity, self._shape(key, stages, chunks)
        counts = np.array(self.counts[(key.dp, mp)], dtype=int)
        for i, choice in self.classes(key.dp, mp)[rep].members:
            plain, inter = member_floors(priced[i], b, cap, shape)
            yield plain, inter, (mi, i, 0), (priced[i], None, 0)
            if counts.size and choice.recompute == "full":
                none = priced[-1 - i]
                plains, inters = count_floors(none, priced[i], counts, b, cap, shape)
                for k, a, c in zip(counts, plains, inters):
                    yield float(a), float(c), (mi, i, int(k)), (priced[i], none, int(k))

    # -- solving a slice -------------------------------------------------------------------
    def _slice_items(self, key) -> list[tuple]:
        """(1F1B floor, interleaved floor, kind, rank, payload) of the slice's classes (kind 0,
        default method) or of every member (kind 1, exhaustive); made once per slice."""
        found = self._items.get(key)
        if found is None:
            found = []
            for mi, (mp, stages) in enumerate(self.submeshes(key.dp)):
                chunks = self._chunks(key, stages)
                for rep, cls in self.classes(key.dp, mp).items():
                    if self.exhaustive:
                        found += [(plain, inter, 1, rank, (mp, stages, spec)) for plain, inter, rank, spec
                                  in self._member_items(key, mi, mp, stages, rep, chunks)]
                    else:
                        plain, inter = self._class_floor(key, mp, stages, rep, chunks)
                        found.append((plain, inter, 0, (mi, cls.members[0][0], 0), (mi, mp, stages, rep)))
            self._items[key] = found
        return found

    def _candidates(self, key, interleaved: bool):
        """A heap of (floor, kind, rank, tie, payload) over the slice's items, and its tie counter."""
        tie = itertools.count()
        items = [(inter if interleaved else plain, kind, rank, next(tie), payload)
                 for plain, inter, kind, rank, payload in self._slice_items(key)]
        heapq.heapify(items)
        return items, tie

    def lower_bound_s(self, key) -> float:
        """No plan of the slice is faster (the least floor of its candidates)."""
        return min((min(item[0], item[1]) for item in self._slice_items(key)), default=math.inf)

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
        found = self._best_interleaved(key, prune_above, plan, estimate)
        self._items.pop(key, None)
        return found

    def _expand(self, key, heap, tie, payload, interleaved: bool) -> None:
        mi, mp, stages, rep = payload
        chunks = self._chunks(key, stages)
        for plain, inter, rank, member in self._member_items(key, mi, mp, stages, rep, chunks):
            heapq.heappush(heap, (inter if interleaved else plain, 1, rank, next(tie), (mp, stages, member)))

    def _best_pipeline(self, key, prune_above: float):
        """min over members of the stage DP's objective, by branch and bound: (objective, rank,
        member, solution) or None."""
        heap, tie = self._candidates(key, interleaved=False)
        best = None
        while heap:
            floor, kind, rank, _, payload = heapq.heappop(heap)
            if floor >= prune_above or (best is not None and floor > best[0]):
                break
            if kind == 0:
                self._expand(key, heap, tie, payload, interleaved=False)
                continue
            if best is not None and floor == best[0] and rank > best[1]:
                continue
            mp, stages, spec = payload
            member = Member(rank=rank, model_parallel=mp, costs=_materialise(spec))
            solved = self._solve_member(key, member, stages)
            if solved is not None and (best is None or (solved.objective_s, rank) < (best[0], best[1])):
                best = (solved.objective_s, rank, member, solved)
        return best

    def _solve_member(self, key, member: Member, stages: int) -> PipelineSolution | None:
        p = self.problem
        num_mb = p.workload.global_batch // (key.dp * key.micro_batch)
        units = p.gpus // key.dp
        most = min(p.space.max_stages, self.num_layers, units)
        b = self.search.micro_batches(key.dp).index(key.micro_batch)
        time, tail, _ = best_by_inflight([member.costs], b, num_mb, min(num_mb, most), self.search.capacity)
        return solve_pipeline(time[None], tail[None], np.array([member.model_parallel]), units, num_mb, most)

    def _plan_of(self, key, best) -> Plan:
        _, _, member, solution = best
        L = self.num_layers
        stages = [member.costs.choice.stage_plan(dp=key.dp, layers=(c.first_layer, c.first_layer + c.num_layers),
                                                 has_embedding=c.first_layer == 0,
                                                 has_head=c.first_layer + c.num_layers == L) for c in solution.stages]
        return _plan(self.search, key, stages)

    def _best_interleaved(self, key, prune_above: float, plan, estimate):
        """Interleaved layouts (equal stages, v chunks per rank, one member) whose floor beats the best."""
        if not any(v > 1 for v in self.problem.space.vpp):
            return plan, estimate
        heap, tie = self._candidates(key, interleaved=True)
        while heap:
            floor, kind, rank, _, payload = heapq.heappop(heap)
            bar = min(prune_above, estimate.step_time_s if estimate is not None and estimate.fits else math.inf)
            if floor >= bar:
                break
            if kind == 0:
                self._expand(key, heap, tie, payload, interleaved=True)
                continue
            mp, stages, spec = payload
            for layout in self._layouts(key, _materialise(spec), stages):
                scored = self.search.evaluate(layout)
                self.num_evaluated += 1
                if estimate is None or _better(scored, estimate):
                    plan, estimate = layout, scored
        return plan, estimate

    def _layouts(self, key, costs: ChoiceCosts, stages: int):
        """The member's interleaved plans, where every stage holds its warm-up micro-batches."""
        L, num_mb = self.num_layers, self.problem.workload.global_batch // (key.dp * key.micro_batch)
        n = L // stages
        r = min(num_mb, stages, self.problem.space.max_stages)
        b = self.search.micro_batches(key.dp).index(key.micro_batch)
        for pos in set(positions_of(stages)):
            need = costs.mem_base_bytes[b, n, pos] + r * costs.mem_per_microbatch_bytes[b, n, pos]
            if not (np.isfinite(costs.time_s[b, n, pos]) and need <= self.search.capacity):
                return
        stage_plans = [costs.choice.stage_plan(dp=key.dp, layers=(i * n, (i + 1) * n), has_embedding=i == 0,
                                               has_head=i == stages - 1) for i in range(stages)]
        for v in sorted(v for v in self.problem.space.vpp if v > 1 and n % v == 0):
            yield _plan(self.search, key, stage_plans, schedule="interleaved", vpp=v)


def _materialise(spec) -> ChoiceCosts:
    full, none, count = spec
    return full if none is None else count_costs(none, full, count)


def _better(a, b) -> bool:
    if a.fits != b.fits:
        return a.fits
    return a.step_time_s < b.step_time_s if a.fits else a.peak_memory_bytes_per_gpu < b.peak_memory_bytes_per_gpu
