"""The uniform search's interleaved pass: after the 1F1B answer of a slice, the interleaved
layouts (equal stages, v chunks per rank, one member) of the classes and members whose floors
beat it, taken in order of their floors and scored by the cost model (autotune.cost.evaluate)."""

from __future__ import annotations

import heapq
import math

import numpy as np

from autotune.search.assemble import _plan
from autotune.search.bounds import positions_of
from autotune.search.heap_items import Counts, beats, materialise, push_counts
from autotune.search.tables import ChoiceCosts, stage_plan_of

__all__ = ["best_interleaved"]


def best_interleaved(search, key, prune_above: float, plan, estimate):
    """Interleaved layouts (equal stages, v chunks per rank, one member) whose floor beats the best
    (``plan``, ``estimate``: the 1F1B answer, or None), by ``search``, a UniformSearch, over its slice ``key``."""
    if not any(v > 1 for v in search.problem.space.vpp):
        return plan, estimate
    heap, tie = search._candidates(key, interleaved=True)
    while heap:
        item = heapq.heappop(heap)
        floor, kind, rank, _, payload = item
        bar = min(prune_above, estimate.step_time_s if estimate is not None and estimate.fits else math.inf)
        if floor >= bar:
            break
        if kind == 0:
            search._expand(key, heap, tie, item, interleaved=True)
            continue
        if isinstance(payload[2], Counts):  # a member's counts, each now in line at its own floor
            push_counts(heap, tie, payload, side=1)
            continue
        mp, stages, spec = payload
        for layout in _layouts(search, key, materialise(spec), stages):
            scored = search.search.evaluate(layout)
            search.num_evaluated += 1
            if estimate is None or beats(scored, estimate):
                plan, estimate = layout, scored
    return plan, estimate

def _layouts(search, key, costs: ChoiceCosts, stages: int):
    """The member's interleaved plans, where every stage holds its warm-up micro-batches."""
    L, num_mb = search.num_layers, search.problem.workload.global_batch // (key.dp * key.micro_batch)
    n = L // stages
    r = min(num_mb, stages, search.problem.space.max_stages)
    b = search.search.micro_batches(key.dp).index(key.micro_batch)
    for pos in set(positions_of(stages)):
        need = costs.mem_base_bytes[b, n, pos] + r * costs.mem_per_microbatch_bytes[b, n, pos]
        if not (np.isfinite(costs.time_s[b, n, pos]) and need <= search.search.capacity):
            return
    stage_plans = [stage_plan_of(costs.choice, key.dp, i == 0, i == stages - 1, (i * n, (i + 1) * n))
                   for i in range(stages)]
    for v in sorted(v for v in search.problem.space.vpp if v > 1 and n % v == 0):
        yield _plan(search.search, key, stage_plans, schedule="interleaved", vpp=v)
