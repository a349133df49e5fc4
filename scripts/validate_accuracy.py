"""Predicted vs measured on this machine: the six-plan accuracy suite of ``autotune validate``.

    python scripts/validate_accuracy.py                 # 2 interleaved rounds, cpu cluster
    python scripts/validate_accuracy.py --rounds 3 --profile my-profile.json --json out.json

Targets on the 2-core CI machine kind (tests/test_validate_accuracy.py checks them): mean
|error| of step time at most 15%, Spearman rank correlation at least 0.8, every plan's peak
memory within 20%. Prints the table of the least disturbed round per plan and the figures,
wall time and net of run-queue wait (time the workers waited for a CPU other processes held).
"""

from __future__ import annotations

from autotune.spec.runtime import load_runtime
import argparse
import json
import os
import sys

from autotune.spec.resolve import resolve_cluster
from autotune.validate.probe import machine_slowdown
from autotune.validate.report import format_table, report_dict
from autotune.validate.runner import ValidateOptions
from autotune.validate.suite import best_of_rounds, run_suite, suite_figures, with_suite_steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cluster", default="cpu")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--json", default=None, help="also write the full report here")
    args = parser.parse_args()
    options = with_suite_steps(ValidateOptions(runtime=load_runtime("torch"), cluster=resolve_cluster(args.cluster, args.profile), max_world=2))
    print(f"load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    slowdowns, rounds = [machine_slowdown(options.cluster.device)], []
    for _ in range(args.rounds):  # a probe GEMM before and after each round: the machine vs its profile
        rounds += run_suite(options, 1, progress=lambda t: print(t, file=sys.stderr))
        slowdowns.append(machine_slowdown(options.cluster.device))
    best = best_of_rounds(rounds)
    figures = suite_figures(best) | {"probe_slowdowns": [round(x, 3) for x in slowdowns]}
    print(format_table(best))
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({**report_dict(best, {"cluster": args.cluster, "profile": args.profile}), "figures": figures},
                      handle, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
