"""Where the warm loop's CPU goes, by part and by slice outcome (a diagnosis, not a benchmark).

    python scripts/warm_parts.py              # the 511 counts of scripts/bench_search.py's warm loop
    python scripts/warm_parts.py --queries 64

One warm process asks what the bench's warm loop asks (`large` on every multiple of 8 GPUs from
16 to 4096, after one query at 8). Printed:

* CPU seconds in each part of the search (parts nest: a member's stage solve is inside the
  slice's solve; the shares do not add up to 100%);
* the slices solved, by outcome: the first of a count (no plan to beat yet), one that beat the
  best so far, one whose plan did not (a plan that lost), one that answered none (its stage DPs
  stopped at the best so far), with their CPU seconds;
* the stage solves of members (autotune.search.inter_op.solve_pipeline), by whether they had a
  bar (a best so far) and answered a plan, with how many stage DPs each ran.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import math
import time
import warnings

# (module, attribute): the parts timed
PARTS = [("autotune.search.uniform", "solve_pipeline"), ("autotune.search.member_floors", "MemberFloors.floors"),
         ("autotune.search.uniform", "UniformSearch.members"), ("autotune.search.uniform", "UniformSearch.lower_bound_s"),
         ("autotune.search.screens", "Screens.class_floors"), ("autotune.search.uniform", "UniformSearch.coarse_bounds_s"),
         ("autotune.search.engine", "baselines"), ("autotune.search.driver", "SliceSearch.evaluate")]


def _timed(f, name: str, spent: dict):
    def wrapped(*args, **kwargs):
        start = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - start
    return wrapped


def _patch(spent: dict, slices: dict, solves: dict) -> None:
    for module, attr in PARTS:
        owner = importlib.import_module(module)
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(owner, cls)
        else:
            name = attr
        setattr(owner, name, _timed(getattr(owner, name), attr, spent))
    driver, inter_op, uniform = (importlib.import_module(f"autotune.search.{m}") for m in ("driver", "inter_op", "uniform"))
    solve_slice, solve_pipeline, dp = driver.SliceSearch.solve_slice, uniform.solve_pipeline, inter_op._min_sum_uniform
    runs = [0]

    def count_dp(*args, **kwargs):
        runs[0] += 1
        return dp(*args, **kwargs)

    def by_outcome(self, key, prune_above=math.inf):
        start = time.process_time()
        plan, estimate = solve_slice(self, key, prune_above)
        kind = ("none" if estimate is None else "first" if not math.isfinite(prune_above)
                else "beat the best" if estimate.step_time_s < prune_above else "lost")
        slices[kind][0] += 1
        slices[kind][1] += time.process_time() - start
        return plan, estimate

    def by_bar(*args, **kwargs):
        runs[0] = 0
        out = solve_pipeline(*args, **kwargs)
        kind = ("with a bar" if math.isfinite(kwargs.get("at_most", math.inf)) else "no bar", "none" if out is None else "a plan")
        solves[kind][0] += 1
        solves[kind][1] += runs[0]
        return out

    inter_op._min_sum_uniform, driver.SliceSearch.solve_slice, uniform.solve_pipeline = count_dp, by_outcome, by_bar


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=0, help="only the first N counts")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from autotune.errors import NoPlanError
    from autotune.search.api import search

    spent, slices, solves = collections.defaultdict(float), collections.defaultdict(lambda: [0, 0.0]), collections.defaultdict(lambda: [0, 0])
    _patch(spent, slices, solves)
    search("large", 8)  # imports and first-call costs
    spent.clear(), slices.clear(), solves.clear()
    counts = list(range(16, 4097, 8))[: args.queries or None]
    start = time.process_time()
    for gpus in counts:
        try:
            search("large", gpus)
        except NoPlanError:
            pass
    total = time.process_time() - start
    print(f"{len(counts)} queries: {total:.2f} CPU s ({len(counts) / total:.1f} per CPU second)")
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {seconds:6.2f} s {100 * seconds / total:5.1f}%  {name}")
    print("slices solved, by outcome:")
    for kind, (number, seconds) in slices.items():
        print(f"  {kind}: {number} slices, {seconds:.2f} CPU s")
    print("member stage solves:")
    for (bar, answer), (number, dps) in solves.items():
        print(f"  {bar}, {answer}: {number} solves, {dps / number:.1f} stage DPs each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
