"""Time ``autotune profile`` against its speed targets (not a test: timings depend on the machine).

    python scripts/bench_profile.py            # quick and full
    python scripts/bench_profile.py --quick    # quick only

Targets on the 2-core CI machine kind: ``--quick`` at most 2 minutes, a full profile at most
15 minutes. Prints the wall time of each run, the load average before it (other processes
slow the run and scatter its points) and the fit summary it printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS_S = {"quick": 120.0, "full": 900.0}


def run(mode: str, out: Path) -> float:
    args = [sys.executable, "-m", "autotune", "profile", "--out", str(out)] + (["--quick"] if mode == "quick" else [])
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    verdict = "within" if elapsed <= TARGETS_S[mode] else "OVER"
    print(f"{mode}: {elapsed:.0f} s ({verdict} the {TARGETS_S[mode]:.0f} s target), load average before {load:.1f}, "
          f"exit {proc.returncode}")
    print(proc.stdout if proc.returncode == 0 else proc.stderr)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the quick profile")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("quick",) if args.quick else ("quick", "full"):
            run(mode, Path(tmp) / f"{mode}.json")


if __name__ == "__main__":
    main()
