"""``autotune check-published``: predicted vs published step times (Calculon-style validation)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check-published", help="compare predictions with published training runs",
                                   description="Predict each run of a published-runs CSV and print the errors.")
    parser.add_argument("runs", nargs="?", default=None, help="CSV with the columns of tests/data/published_runs.csv (default: the shipped one)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.calibrate import check_runs, load_published_runs
    from autotune.cli.common import print_json

    path = args.runs or Path(__file__).resolve().parents[2] / "tests" / "data" / "published_runs.csv"
    checks = check_runs(load_published_runs(path))
    errors = [abs(c.error) for c in checks]
    if args.json:
        print_json({"runs": [{"id": c.run.run_id, "published_iter_s": c.run.iter_s,
                              "predicted_step_time_s": c.estimate.step_time_s, "error": c.error} for c in checks],
                    "mean_abs_error": sum(errors) / len(errors), "max_abs_error": max(errors)})
        return 0
    print(f"{'run':15s} {'published':>10s} {'predicted':>10s} {'error':>8s}")
    for c in checks:
        print(f"{c.run.run_id:15s} {c.run.iter_s:10.3f} {c.estimate.step_time_s:10.3f} {100 * c.error:+7.1f}%")
    print(f"mean absolute error {100 * sum(errors) / len(errors):.1f}%, worst {100 * max(errors):.1f}%")
    return 0
