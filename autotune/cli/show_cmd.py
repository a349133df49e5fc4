"""``autotune show RUN`` and ``autotune explain RUN``: a finished run printed again, or its
time and memory breakdown per stage (re-scored with the current cost model)."""

from __future__ import annotations

import argparse

__all__ = ["register", "run_show", "run_explain"]


def register(subparsers: argparse._SubParsersAction) -> None:
    show = subparsers.add_parser("show", help="print a finished search run again")
    show.add_argument("run", help="run directory (runs/<timestamp>-<model>-<gpus>)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    explain = subparsers.add_parser("explain", help="time and memory breakdown per stage of a run's plan")
    explain.add_argument("run", help="run directory or plan.json")
    explain.add_argument("--json", action="store_true")
    explain.set_defaults(func=run_explain)


def run_show(args: argparse.Namespace) -> int:
    from autotune.cli.common import print_json
    from autotune.outputs.run_dir import load_search_record

    from autotune.plan.io import read_plan_file

    from autotune.search.record import check_search_record

    path, record = load_search_record(args.run, check=check_search_record)
    read_plan_file(path)  # a missing or corrupt plan.json is an error, not a report printed as if whole
    if args.json:
        print_json(record)
        return 0
    from autotune.spec.json_file import read_text_file

    print(read_text_file(path / "report.md", "run") if (path / "report.md").exists() else record)
    return 0


def run_explain(args: argparse.Namespace) -> int:
    from autotune.cli.common import estimate_table, print_json
    from autotune.outputs.report import LAYERS_KEY, plan_table, stage_breakdown_text
    from autotune.outputs.rescore import rescore
    from autotune.outputs.search_run import workload_text

    from autotune.spec.runtime import resolve_runtime

    plan_file, estimate = rescore(args.run)
    runtime = resolve_runtime(plan_file.runtime)
    if args.json:
        print_json({"runtime": runtime.to_dict(), "plan": plan_file.plan.to_dict(), "estimate": estimate.to_dict()})
        return 0
    print(f"runtime {runtime.name}")
    print(f"workload: {workload_text(plan_file.workload)}")
    print("\n".join(plan_table(plan_file.plan, estimate)))
    print(f"({LAYERS_KEY})")
    print(estimate_table(estimate, plan_file.workload))
    print("per stage:")
    print("\n".join(stage_breakdown_text(estimate)))
    return 0
