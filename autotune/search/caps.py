"""Branch and bound over the stage DP's two caps (autotune.search.inter_op).

A plan's objective is combine(sum_i t_i, max_i t_i) + max_i tail_i. Each plan has a cell: its
slowest stage time and its largest tail, both among the candidates (``caps``, ``tails``, sorted).
For caps (c, d) let G(c, d) be the least stage-time sum of a plan whose every stage takes at most
c and has a tail of at most d (one capped DP); G does not grow with either cap. A box of cells
[caps[i0], caps[i1]] x [tails[k0], tails[k1]] whose G at a corner above it is at least f holds
no plan scoring under lower(f, caps[i0], tails[k0]). Boxes are solved at their top corner, best
bound first, until no bound beats the best: the plan found there (slowest t, largest tail u)
is the least sum under every pair of caps in [t, top] x [u, top], so it scores no more than any
plan whose cell lies there, and only the rest of the box stays open (cells with a slowest stage
under t; cells from t up with a largest tail under u), in halves so that their bounds rise.
This is Alpa's enumeration of t_max (Zheng et al., OSDI'22, sec. 5.2) with the tail enumerated
the same way, as a branch and bound; exact, tested against brute force (tests/test_inter_op.py).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import numpy as np

__all__ = ["branch_and_bound"]


def branch_and_bound(solve: Callable, caps: np.ndarray, tails: np.ndarray, floor: float, cuts, best: tuple,
                     score: Callable, measure: Callable, lower: Callable) -> tuple:
    """(objective, cuts) of the best plan. ``solve(c, d)``: (G(c, d), its plan's cuts or None);
    ``floor``, ``cuts``: G with no caps and its plan; ``best``: (objective, cuts) known so far;
    ``score(cuts)``: a plan's objective; ``measure(cuts)``: its (slowest stage, largest tail);
    ``lower(f, c, d)``: the least objective of a plan with sum >= f, slowest >= c, largest tail >= d."""
    best_value, best_cuts = best
    heap: list = []
    order = itertools.count()

    def push(i0: int, i1: int, k0: int, k1: int, f: float) -> None:
        if i0 <= i1 and k0 <= k1:
            heapq.heappush(heap, (lower(f, caps[i0], tails[k0]), next(order), i0, i1, k0, k1, f))

    def halves(i0: int, i1: int, k0: int, k1: int, f: float) -> None:
        if k1 > k0:  # the least tail's row on its own: its bound is the box's (where the step's tail
            push(i0, i1, k0, k0, f)  # decides, its plan is the best and the rows above bound higher)
            k0 += 1
        if i1 - i0 >= k1 - k0:  # along the longer side (the caps' halves as Alpa's list, low half first)
            mid = (i0 + i1 - 1) // 2
            push(i0, mid, k0, k1, f), push(mid + 1, i1, k0, k1, f)
        else:
            mid = (k0 + k1 - 1) // 2
            push(i0, i1, k0, mid, f), push(i0, i1, mid + 1, k1, f)

    def leave(box: tuple, f: float, plan, split: bool) -> None:
        i0, i1, k0, k1 = box
        slowest, tail = measure(plan)
        it = min(i1 + 1, int(np.searchsorted(caps, slowest, side="left")))
        kt = min(k1 + 1, int(np.searchsorted(tails, tail, side="left")))
        if i0 <= it - 1:
            (halves if split else push)(i0, it - 1, k0, k1, f)  # cells whose slowest stage is under the plan's
        if k0 <= kt - 1 and it <= i1:
            halves(it, i1, k0, kt - 1, f)  # from its slowest stage up, a largest tail under its

    leave((0, len(caps) - 1, 0, len(tails) - 1), floor, cuts, split=False)
    while heap:
        bound, _, i0, i1, k0, k1, _ = heapq.heappop(heap)
        if bound >= best_value:
            break
        total, plan = solve(caps[i1], tails[k1])
        if plan is None:
            continue  # no plan under the box's top caps, hence none in it
        value = score(plan)
        if value < best_value:
            best_value, best_cuts = value, plan
        leave((i0, i1, k0, k1), total, plan, split=True)
    return best_value, best_cuts
