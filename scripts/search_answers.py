"""The default search's answers on issue 28's cases, to check that a speed-up changes none
(a check, not a benchmark).

    python scripts/search_answers.py dump before.json [--cases deepseek-v3,175b]   # one branch
    python scripts/search_answers.py dump after.json                               # the other
    python scripts/search_answers.py compare before.json after.json

``dump`` runs scripts/bench_search.py's cases (rich space, cache off) in this process and writes
each case's plan, estimate, baselines and search counts (wall time left out); ``compare`` names
the cases whose answers differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
DEFAULT_CASES = "deepseek-v3,175b,large,1t"


def dump(path: str, cases: str) -> None:
    from autotune.search.api import search
    from bench_search import _case_args

    warnings.filterwarnings("ignore")
    out = {}
    for name in cases.split(","):
        model, gpus, cluster, workload = _case_args(name)
        result = search(model, gpus, cluster=cluster, workload=workload, cache=False, plots="none").to_dict()
        result["stats"].pop("wall_time_s")
        out[name] = result
        print(name, result["estimate"]["step_time_s"], flush=True)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")


def compare(before: str, after: str) -> int:
    old, new = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    differ = [name for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
    print("differ: " + ", ".join(differ) if differ else f"identical ({len(old)} cases)")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("dump", "compare"))
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--cases", default=DEFAULT_CASES)
    args = parser.parse_args()
    if args.what == "compare":
        return compare(*args.paths)
    dump(args.paths[0], args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
