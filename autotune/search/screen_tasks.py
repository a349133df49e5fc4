"""The price tasks a uniform-stage search hands to its worker processes (autotune.search.parallel),
and what a worker makes of one. A task is a plain tuple, its own key:

* ``("bare", dp, submesh, choice)``: the choice's bare stage (members.bare_times);
* ``("time" | "lean", dp, submesh, choice, positions, micro-batch sizes, inter_node)``: choice_costs
  of a time screen's positions, or a leanest member's memory alone (Screens.price takes them);
* ``("refine", submesh, class, ((slice, shape), ...))``: the class's refined floors on those slices
  and how many tables they priced (Screens.refined_floor);
* ``BASELINES``: the search's baselines (autotune.search.baselines), a few tenths of a second of plan
  evaluations scored beside the first round's tables rather than after the search.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.search.members import bare_times
from autotune.search.tables import choice_costs

__all__ = ["BASELINES", "compute"]

BASELINES = ("baselines",)


def compute(screens, task: tuple):
    """What bare_screen, price or refined_floor of ``screens`` (a Screens) makes of ``task``,
    without the caches."""
    if task == BASELINES:
        from autotune.search.baselines import baselines

        return baselines(screens.problem)
    if task[0] == "refine":  # ({slice: (1F1B, interleaved) floors}, tables priced)
        _, mp, rep, slices = task
        before = screens.search.num_trials
        return {key: screens.refined_floor(key, mp, rep, shape) for key, shape in slices}, screens.search.num_trials - before
    ctx = screens.search._slice_context(task[1])
    if task[0] == "bare":
        return bare_times(ctx, task[3])
    kind, _, _, choice, positions, sizes, inter_node = task
    ctx = ctx if sizes is None else replace(ctx, micro_batches=sizes)
    return choice_costs(ctx, choice, list(positions), inter_node, memory_only=kind == "lean")
