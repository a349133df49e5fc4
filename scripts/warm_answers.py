"""The warm loop's answers, to check that a speed-up changes none (a check, not a benchmark).

    python scripts/warm_answers.py dump before.json [--queries N]   # on one branch
    python scripts/warm_answers.py dump after.json                  # on the other
    python scripts/warm_answers.py compare before.json after.json

``dump`` asks one warm process what scripts/bench_search.py's warm loop asks (`large` on every
multiple of 8 GPUs from 16 to 4096, after one query at 8) and writes each count's plan, step
time, where the plan came from and the baselines' plans and estimates, or why nothing fits; it
prints the CPU seconds per query (the figure a shared machine moves least). ``compare`` names
the counts whose answers differ.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import warnings


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def dump(path: str, queries: int) -> None:
    from autotune.errors import NoPlanError
    from autotune.search.api import search

    warnings.filterwarnings("ignore")
    search("large", 8)  # imports and first-call costs
    counts = list(range(16, 4097, 8))[: queries or None]
    out, cpu = {}, _cpu_s()
    for gpus in counts:
        try:
            r = search("large", gpus)
        except NoPlanError as err:
            out[gpus] = {"error": err.message}
            continue
        out[gpus] = {"plan": r.plan.to_dict(), "step_s": r.estimate.step_time_s, "best_from": r.stats.best_from,
                     "baselines": [b.to_dict() for b in r.baselines]}
    cpu = _cpu_s() - cpu
    print(f"{len(counts)} queries: {1000 * cpu / len(counts):.2f} ms CPU per query ({len(counts) / cpu:.1f} per CPU "
          f"second), peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    with open(path, "w") as f:
        json.dump(out, f, sort_keys=True, default=str)


def compare(before: str, after: str) -> int:
    with open(before) as f, open(after) as g:
        a, b = json.load(f), json.load(g)
    differ = sorted((int(k) for k in set(a) | set(b) if a.get(k) != b.get(k)))
    print(f"{len(set(a) | set(b))} GPU counts; {len(differ)} answers differ" + (f": {differ[:20]}" if differ else ""))
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("dump")
    one.add_argument("path")
    one.add_argument("--queries", type=int, default=0, help="only the first N counts")
    two = sub.add_parser("compare")
    two.add_argument("before")
    two.add_argument("after")
    args = parser.parse_args()
    if args.what == "dump":
        start = time.perf_counter()
        dump(args.path, args.queries)
        print(f"{time.perf_counter() - start:.1f} s wall")
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
