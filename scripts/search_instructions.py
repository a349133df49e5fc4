"""Instructions one default search executes (valgrind's cachegrind), a figure a shared machine's
load does not move (a benchmark, not a test): for comparing two branches on a loaded machine.

    python scripts/search_instructions.py deepseek-v3          # a case of scripts/bench_search.py
    python scripts/search_instructions.py deepseek-v3 --child  # (internal) the measured process

The search runs in one process (AUTOTUNE_PROCESSES=1), string hashes fixed (PYTHONHASHSEED=0),
bytecode cached in a temporary prefix (warmed by a first run); the figure is the run's
instructions less those of the same process stopping before the search (imports, case set-up).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path


def _child(name: str, search_too: bool) -> None:
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from autotune.search.api import search
    from bench_search import _case_args

    model, gpus, cluster, workload = _case_args(name)
    if search_too:
        search(model, gpus, cluster=cluster, workload=workload, cache=False, plots="none")


def _instructions(args: list[str], env: dict) -> int:
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=True)
    return int(re.search(r"I\s+refs:\s+([\d,]+)", out.stderr).group(1).replace(",", ""))


def main() -> int:
    if "--child" in sys.argv:
        _child(sys.argv[1], "--imports-only" not in sys.argv)
        return 0
    name = sys.argv[1]
    with tempfile.TemporaryDirectory() as pycache:
        env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPYCACHEPREFIX": pycache,
               "PYTHONHASHSEED": "0", "AUTOTUNE_PROCESSES": "1"}
        subprocess.run([sys.executable, __file__, name, "--child"], env=env, check=True)  # bytecode cached
        whole = _instructions([name, "--child"], env)
        before = _instructions([name, "--child", "--imports-only"], env)
    print(f"{name}: {(whole - before) / 1e9:.3f} G instructions in the search ({whole / 1e9:.3f} G the whole process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
