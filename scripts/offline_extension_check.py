"""Check autotune/cost/serving_offline.py's extension against whole simulated runs.

usage: python scripts/offline_extension_check.py tests/data/FILE.csv ROW_ID [ROW_ID ...] [--head N ...]

For each maximum-throughput row: the throughput of the run of every request the row issues a replica against
the extension (extended_trace) of heads of N requests (default: MAX_RATE_REQUESTS and the head offline_draws
settles on), with each head's steady_drains and the wall time of each simulation.
"""

from __future__ import annotations

import csv
import sys
import time
from dataclasses import replace

from autotune.calibrate.serving_rows import MAX_RATE_REQUESTS, case_from_row
from autotune.cost.serving_eval import arrival_draws, expected_metric
from autotune.cost.serving_offline import extended_trace, offline_draws, steady_drains


def _value(case, runs) -> float:
    return expected_metric(runs, case.metric, scope=case.scope) / case.unit_to_si


def _timed(call):
    start = time.time()
    return call(), time.time() - start


def check(case, heads: list[int]) -> None:
    n = case.load.num_requests
    full, full_s = _timed(lambda: _value(case, arrival_draws(case.deployment, case.load)))
    priced, priced_s = _timed(lambda: offline_draws(case.deployment, case.load, MAX_RATE_REQUESTS))
    print(f"{case.row_id}: {n} requests a replica; measured {case.measured:g}; whole run {full:.1f} ({full_s:.1f} s); "
          f"offline_draws {_value(case, priced):.1f} ({100 * (_value(case, priced) / full - 1):+.2f}%, {priced_s:.1f} s)")
    for head in heads:
        (run,), head_s = _timed(lambda h=head: arrival_draws(case.deployment, replace(case.load, num_requests=h)))
        trace = extended_trace(run.trace, n)
        shown = "none" if trace is None else f"{100 * (_value(case, (replace(run, trace=trace),)) / full - 1):+.2f}%"
        print(f"  head {head}: {steady_drains(run.trace):.1f} drains before its second half; extended {shown}; "
              f"unextended {100 * (_value(case, (run,)) / full - 1):+.2f}% ({head_s:.1f} s)", flush=True)


def main(args: list[str]) -> None:
    heads = [int(h) for h in args[args.index("--head") + 1:]] if "--head" in args else [MAX_RATE_REQUESTS]
    args = args[:args.index("--head")] if "--head" in args else args
    rows = {r["id"]: r for r in csv.DictReader(open(args[0], newline=""))}
    for row_id in args[1:]:
        check(case_from_row(rows[row_id]), heads)


if __name__ == "__main__":
    main(sys.argv[1:])
