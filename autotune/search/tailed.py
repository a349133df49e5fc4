"""The uniform search's 1F1B pass with each class's floor raised by its least step tail.

A class's floors (bare stage, time screen, memory, per way of recomputing: autotune.search.screens)
leave out the step's tail (gradient sync and optimizer), since its members' tails differ; on a
thousand GPUs that tail is about 2% of a step of ``large``, as large as the gap between the floors
and the plans, so every class of a slice came up and had its members floored. A plan's objective
is its stages' times plus the largest tail of any stage (autotune.search.inter_op), at least the
first stage's, so the class floor plus the least tail of any member's first (or only) stage, at
any layer count the first stage can hold, is a floor too (a partial recomputation count's tail lies between its
two members' tails). Here a class is put back in line at that raised floor when it first comes up,
so classes whose floor with the tail is above a solved plan never have their members priced into
floors or solved.

This reorders the candidates and nothing else: the unchanged pass (the exhaustive method's,
UniformSearch._best_pipeline_in_order) answers with the least (objective, rank) of the members it
considers, those of the classes whose floors stay below ``prune_above`` as they come up, with
their own floors below it (where its best beats ``prune_above`` that is every member that could
beat it; otherwise it stops at the first floor at or above ``prune_above``). This pass drops the
same classes and members (by the same floors, without tails) and stops only where every item
left floors above its best, so it answers with the same member -- or with none where that member
scores above ``prune_above`` (a plan of another slice is better: the slice is pruned), since
each member's stage DP stops at the lesser of ``prune_above`` and the best so far (a member
scoring above either cannot be the slice's answer, nor the search's).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from autotune.search.heap_items import Counts, dominates, materialise, push_counts, tables_at
from autotune.search.members import Member
from autotune.search.screens import price_positions
from autotune.search.tables import FIRST, LAST, SINGLE

__all__ = ["best_pipeline", "in_order", "least_tail_s"]

# The raised floor is shaded down by this share, so that rounding in the floor's sums (a few
# ulps) can never put it above a plan's objective.
_SHADE = 1e-12


def least_tail_s(search, key, mp: int, stages: int, rep) -> float:
    """A floor on the largest step tail (inf and NaN read as 0, as the stage DP reads them) of a
    plan of any member of the class at the slice's degree and micro-batch: the least tail of its
    first (or only) stage, and of its last, at the layer counts they can hold where their time is
    finite; 0 where the members are not all priced yet (their tables are made only for a class
    that comes up without the raise: a search prices no table for it)."""
    found = _least_tails(search, key.dp, mp, stages, rep)
    if found is None:
        return 0.0
    b = search.search.micro_batches(key.dp).index(key.micro_batch)
    if stages == 1:
        return float(found[0][b][-1])
    return float(max(found[0][b][search.num_layers - stages + 1], found[1][b][search.num_layers - stages + 1]))


def _all_priced(search, dp: int, mp: int, stages: int, rep) -> bool:
    """Whether every member of the class at ``dp`` has its tables (this search's, or the cache's
    for the positions of ``stages``: UniformSearch.members then prices none)."""
    if (dp, mp, rep) in search._priced:
        return True
    positions = tuple(price_positions(stages))
    return all(search.screens.member_priced(dp, mp, choice, positions) for _, choice in search.screens.classes(dp, mp)[rep].members)


def _least_tails(search, dp: int, mp: int, stages: int, rep) -> tuple[list[np.ndarray], ...] | None:
    """Per position (the only stage; or first, then last), per micro-batch size, by n: the least
    tail of the class's members at ``dp`` as a stage of at most n layers there (as the only
    stage: of n layers, read at n = L), priced at the positions of ``stages``
    (autotune.search.screens.price_positions); kept in the plan cache (members' tables depend on
    the positions priced and the links their sends were priced by, not otherwise on the GPU count)."""
    cache, base = search.screens._cache()
    positions = (SINGLE,) if stages == 1 else (FIRST, LAST)
    cache_key = (base, "least tails", dp, mp, search.search.micro_batches(dp), rep, positions,
                 search.screens.sends_both_links(mp * dp))
    found = cache.study(cache_key)
    if found is None:
        if not _all_priced(search, dp, mp, stages, rep):
            return None
        priced = list(search.members(dp, mp, stages, rep).values())
        found = tuple(_least_by_n(priced, position, accumulate=stages > 1) for position in positions)
        cache.store_study(cache_key, found)
    return found


def _least_by_n(priced: list, position: int, accumulate: bool) -> list[np.ndarray]:
    time = np.stack([c.time_s[..., position] for c in priced])  # [member, micro-batch, n]
    tail = np.stack([c.tail_s[..., position] for c in priced])
    least = np.where(np.isfinite(time), np.where(np.isfinite(tail), tail, 0.0), np.inf).min(axis=0)
    return list(np.minimum.accumulate(least, axis=-1) if accumulate else least)


def best_pipeline(search, key, prune_above: float):
    """UniformSearch._best_pipeline_in_order's answer, with classes raised by their least tail:
    (objective, rank, member, solution), or None. The members that pass considers are those of
    the classes whose floors stay below ``prune_above`` while they come up, with their own floors
    below it; its answer is the least (objective, rank) of them (a member it stops before is no
    better than the best it has). So is this pass's: it drops the same items (their floors
    without tails), and stops only where every item left floors above the best it has; but None
    where that answer scores above ``prune_above``."""
    heap, tie = search._candidates(key, interleaved=False)
    untailed: dict[int, float] = {}  # a raised class item's floor without its tail, by its tie number
    tails: dict[tuple, float] = {}  # least_tail_s by (submesh, class)
    best, solved_tables = None, {}
    b = search.search.micro_batches(key.dp).index(key.micro_batch)
    while heap:
        floor, kind, rank, number, payload = heapq.heappop(heap)
        if best is not None and floor > best[0]:
            break
        if (untailed.get(number, floor) if kind == 0 else floor) >= prune_above:
            untailed.pop(number, None)
            continue  # the unchanged pass never takes it (it stops there)
        if kind == 0:
            _class_up(search, key, heap, tie, (floor, kind, rank, number, payload), untailed, tails)
        elif isinstance(payload[2], Counts):
            push_counts(heap, tie, payload, side=0)
        elif not (best is not None and floor == best[0] and rank > best[1]):
            best = _solve(search, key, rank, payload, b, solved_tables, best, prune_above)
    return best


def in_order(search, key, prune_above: float):
    """UniformSearch._best_pipeline_in_order: members taken in order of their floors, classes at
    their floors without tails, until a floor reaches ``prune_above`` or exceeds the best."""
    heap, tie = search._candidates(key, interleaved=False)
    best, solved_tables = None, {}
    b = search.search.micro_batches(key.dp).index(key.micro_batch)
    while heap:
        item = heapq.heappop(heap)
        floor, kind, rank, _, payload = item
        if floor >= prune_above or (best is not None and floor > best[0]):
            break
        if kind == 0:
            search._expand(key, heap, tie, item, interleaved=False)
        elif isinstance(payload[2], Counts):  # a member's counts, each now in line at its own floor
            push_counts(heap, tie, payload, side=0)
        elif not (best is not None and floor == best[0] and rank > best[1]):
            best = _solve(search, key, rank, payload, b, solved_tables, best)
    return best


def _class_up(search, key, heap: list, tie, item: tuple, untailed: dict, tails: dict) -> None:
    """A class taken from the line: first back in line at its floor plus its least tail; then as
    UniformSearch._expand (its screens, then its members; a class it puts back is raised again
    when it next comes up)."""
    floor, kind, rank, number, payload = item
    if number not in untailed:  # its floor without the tail: raise it
        _, mp, stages, rep, _, _ = payload
        if (mp, rep) not in tails:
            tails[(mp, rep)] = least_tail_s(search, key, mp, stages, rep)
        raised = max(floor, (floor + tails[(mp, rep)]) * (1.0 - _SHADE))
        number = next(tie)
        untailed[number] = floor
        heapq.heappush(heap, (raised, 0, rank, number, payload))
        return
    search._expand(key, heap, tie, (untailed.pop(number), kind, rank, number, payload), interleaved=False)


def _solve(search, key, rank, payload, b: int, solved_tables: dict, best, prune_above: float = math.inf):
    """A member taken from the line: solved unless a member before it dominates it; the better of
    it and ``best`` (it only where it scores at most ``prune_above``)."""
    mp, stages, spec = payload
    member = Member(rank=rank, model_parallel=mp, costs=materialise(spec))
    tables = tables_at(member.costs, b)
    if any(other_rank < rank and dominates(other, tables) for other_rank, other in solved_tables.get(mp, ())):
        return best  # a member before it is no slower, no longer-tailed and no larger anywhere
    solved_tables.setdefault(mp, []).append((rank, tables))
    # a member scoring above the best so far (or above prune_above) cannot win: its solve stops there (None)
    solved = search._solve_member(key, member, stages, min(prune_above, math.inf if best is None else best[0]))
    if solved is not None and (best is None or (solved.objective_s, rank) < (best[0], best[1])):
        return solved.objective_s, rank, member, solved
    return best
