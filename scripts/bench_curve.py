"""Speed of a scaling-curve query as a scheduler makes it (issue 7's target; a benchmark, not a test).

    python scripts/bench_curve.py [--model large] [--cluster dgx-h100]

In one process, through ``autotune.scaling_curve``: the cold time of 10 GPU counts (1, 2, 4, ...,
512), the warm time of the same query (target <= 1 s: every point is a plan-cache result), and the
time of 10 other counts overlapping the first (new counts reuse intra-op studies of the counts
they share data-parallel degrees and stage sizes with), each with the plan cache's study
hits and misses (autotune.search.cache.PLAN_CACHE).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's autotune, installed or not
warnings.filterwarnings("ignore")

FIRST = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
OVERLAPPING = [8, 16, 24, 32, 48, 64, 96, 128, 192, 256]  # 6 counts of the first query, 4 new


def timed_query(model: str, cluster: str, counts: list[int]) -> tuple[float, int, int, object]:
    """Seconds of one scaling_curve call, and the study hits and misses it added."""
    import autotune
    from autotune.search.cache import PLAN_CACHE

    hits, misses = PLAN_CACHE.hits, PLAN_CACHE.misses
    start = time.perf_counter()
    curve = autotune.scaling_curve(model, counts, cluster=cluster)
    return time.perf_counter() - start, PLAN_CACHE.hits - hits, PLAN_CACHE.misses - misses, curve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="large")
    parser.add_argument("--cluster", default="dgx-h100")
    args = parser.parse_args()
    import autotune.search.api  # noqa: F401  (imports are not part of a query)

    cold_s, cold_hits, cold_misses, cold = timed_query(args.model, args.cluster, FIRST)
    warm_s, warm_hits, warm_misses, warm = timed_query(args.model, args.cluster, FIRST)
    same = all(a.estimate is b.estimate for a, b in zip(cold.points, warm.points))
    other_s, other_hits, other_misses, _ = timed_query(args.model, args.cluster, OVERLAPPING)
    print(f"{args.model} on {args.cluster}, counts {','.join(map(str, FIRST))}:")
    print(f"  cold: {cold_s:.2f} s (intra-op studies: {cold_hits} reused, {cold_misses} run)")
    print(f"  warm, same query: {warm_s * 1e3:.1f} ms (target <= 1 s; {warm_hits} reused, {warm_misses} run; "
          f"{'the cached results' if same else 'NOT the cached results'})")
    print(f"  overlapping query {','.join(map(str, OVERLAPPING))}: {other_s:.2f} s "
          f"(intra-op studies: {other_hits} reused, {other_misses} run; "
          f"{len(set(OVERLAPPING) & set(FIRST))} of its counts were cached results)")


if __name__ == "__main__":
    main()
