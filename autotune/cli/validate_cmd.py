"""``autotune validate``: run plans for real on this machine and set measured beside predicted."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autotune.cli.common import positive_int, print_json

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="run plans with torch on this machine and compare with the prediction",
        description="Execute plans (run directories or plan files) on local worker processes (gloo on CPU), "
                    "check that their losses match a single-process run, and compare measured step time and "
                    "peak memory with the cost model's prediction for this machine.")
    parser.add_argument("plans", nargs="+", metavar="RUN|PLAN", help="run directory (with plan.json) or plan file")
    parser.add_argument("--scale", nargs="?", const="auto", default=None, metavar="auto|KEY=N,...",
                        help="shrink model, batch and world size to fit this machine, keeping the plan's shape; "
                             "keys: world, hidden, head_dim, layers, seq, vocab, micro_batch, microbatches")
    parser.add_argument("--max-world", type=positive_int, default=None,
                        help="most worker processes at once (default: one per core, at least 2)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cpu: worker processes with gloo (default); cuda: one GPU per worker with NCCL")
    parser.add_argument("--cluster", default=None,
                        help="cluster preset or file to predict with (default: cpu; required with --device cuda)")
    parser.add_argument("--profile", default=None, help="profile JSON from `autotune profile` for this machine")
    parser.add_argument("--runtime", default="torch",
                        help="the runtime whose prediction is compared: torch (default: what validate runs, eager "
                             "PyTorch with DDP, FSDP2, DTensor and pipelining), or another preset (autotune runtimes)")
    parser.add_argument("--steps", type=positive_int, default=5, help="timed steps per plan (default 5)")
    parser.add_argument("--timeout", type=positive_int, default=300, help="seconds before a plan's run is killed")
    parser.add_argument("--out", default=None, help="report path (default: RUN/validation.json, or beside the plan file)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    parser.set_defaults(func=run)


def _report_path(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    first = Path(args.plans[0])
    if len(args.plans) > 1:
        return Path("validation.json")
    if first.is_dir():
        return first / "validation.json"
    return first.with_name("validation.json" if first.name == "plan.json" else f"{first.stem}.validation.json")


def run(args: argparse.Namespace) -> int:
    import os

    from autotune.cli.common import require_torch

    require_torch("validate")
    from autotune.plan.io import atomic_write_text
    from autotune.validate.report import format_table, report_dict
    from autotune.validate.runner import read_case, validate_cases

    inputs = [(path, *read_case(path)) for path in args.plans]
    options = _options(args)
    context = {"runtime": args.runtime, "cluster": options.cluster.name, "profile": args.profile,
               "max_world": options.max_world, "cpu_count": os.cpu_count(), "scale": args.scale,
               "load_average_before": os.getloadavg()[0]}
    out = _report_path(args)

    def write(results: list) -> None:  # after every plan: an interrupted run keeps what finished
        report = report_dict(results, {**context, "load_average_after": os.getloadavg()[0]})
        atomic_write_text(out, json.dumps(report, indent=2, default=str) + "\n")

    results = validate_cases(inputs, options, progress=lambda text: sys.stderr.write(text + "\n"), on_result=write)
    report = json.loads(out.read_text())
    if args.json:
        print_json(report)
    else:
        print(f"predictions for runtime {args.runtime}")
        print(format_table(results))
        print(f"wrote {out}")
    return 0 if results and all(r.status == "ok" for r in results) else 1


def _options(args: argparse.Namespace):
    """The runs' settings from the flags: the cluster predicted with, the worker count, the scale
    and the runtime; the report path is checked first (before any plan runs: its report could not
    be kept)."""
    from autotune.errors import require
    from autotune.plan.io import check_output_path
    from autotune.spec.resolve import resolve_cluster
    from autotune.spec.runtime import resolve_runtime
    from autotune.validate.runner import ValidateOptions, default_world
    from autotune.validate.scale import parse_scale

    require(args.device == "cpu" or args.cluster is not None, "cluster",
            "with --device cuda, name the cluster to predict with (a preset such as dgx-h100, or a cluster file)")
    world = args.max_world or default_world(args.device)
    require(world >= 1, "device", "no CUDA device is visible; use --device cpu")
    cluster = resolve_cluster(args.cluster or "cpu", args.profile)
    scale = parse_scale(args.scale, world=world) if args.scale is not None else None
    check_output_path(_report_path(args))
    return ValidateOptions(cluster=cluster, runtime=resolve_runtime(args.runtime), scale=scale, max_world=world,
                           timeout_s=float(args.timeout), measured_steps=args.steps,
                           backend="nccl" if args.device == "cuda" else "gloo")
