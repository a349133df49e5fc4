"""``autotune curve``: the best plan and throughput at each GPU count (strong scaling), and the knee."""

from __future__ import annotations

import argparse

from autotune.cli.common import add_workload_args, print_json, resolve_dtype
from autotune.cli.evaluate_cmd import add_runtime_args, runtime_from_args
from autotune.spec.resolve import DEFAULT_CLUSTER

__all__ = ["register", "run"]

EXAMPLES = """examples:
  autotune curve --model large --gpus 1,2,4,8,16,32,64,128,256,512
  autotune curve --model gpt3-13b --gpus 8,16,32,64,128 --cluster dgx-a100-80gb --global-batch 1024 --json
  autotune curve --model llama3-8b --gpus 8,16,32,64 --no-run-dir

Writes runs/<timestamp>-<model>-curve/ with curve.json and curve.png (tokens/s and scaling
efficiency against GPUs, the knee marked) unless --no-run-dir. A count where nothing fits is a
row saying so, not an error; a count the cluster cannot form is bad input (exit code 2).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "curve", help="throughput and scaling efficiency of the best plan at each GPU count, and the knee",
        description="Search the best plan at each GPU count (same model, cluster and global batch) and print "
                    "tokens/s, scaling efficiency, step time, MFU, memory and the plan; the knee is the most "
                    "GPUs whose scaling efficiency is still at least --threshold.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="preset name or path to a Hugging Face config.json")
    parser.add_argument("--gpus", required=True, help="comma-separated GPU counts, e.g. 1,2,4,8,16")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help="cluster preset or a cluster file")
    parser.add_argument("--profile", default=None, help="profile JSON from `autotune profile` replacing the device's fits")
    add_workload_args(parser)
    add_runtime_args(parser)
    parser.add_argument("--space", default=None, help="search space name (search_spaces/*.toml) or a .toml path; "
                                                      "default: the runtime's")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the searches")
    parser.add_argument("--threshold", type=float, default=0.8,
                        help="scaling efficiency that defines the knee (default 0.8)")
    parser.add_argument("--json", action="store_true", help="print the curve as JSON")
    parser.add_argument("--runs-dir", default="runs", help="where run directories go (default: runs/)")
    parser.add_argument("--no-run-dir", action="store_true", help="only print: no run directory, no plot")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.errors import require
    from autotune.outputs.run_dir import check_writable
    from autotune.search.curve import parse_gpu_list, scaling_curve

    counts = parse_gpu_list(args.gpus)
    require(0.0 < args.threshold <= 1.0, "threshold", f"must be in (0, 1], got {args.threshold}")
    if not args.no_run_dir:
        check_writable(Path(args.runs_dir))  # before the searches, not after
    runtime = runtime_from_args(args)
    inputs = {"cluster": args.cluster, "profile": args.profile, "global_batch": args.global_batch, "runtime": runtime,
              "seq_len": args.seq_len, "dtype": resolve_dtype(args), "attention": args.attention, "space": args.space,
              "seed": args.seed}
    curve = scaling_curve(args.model, counts, efficiency_threshold=args.threshold, **inputs)
    record = {"runtime": runtime.to_dict(), **curve.to_dict(), "inputs": {**inputs, "runtime": runtime.name, "gpus": counts}}
    files = {} if args.no_run_dir else _write_run(Path(args.runs_dir), curve, record)
    if args.json:
        print_json({**record, "files": files})
        return 0
    from autotune.outputs.curve_report import curve_table

    print(f"runtime {runtime.name}")
    print("\n".join(curve_table(curve)))
    for name, path in files.items():
        print(f"{name}: {path}")
    return 0


def _write_run(root, curve, record: dict) -> dict[str, str]:
    """runs/<timestamp>-<model>-curve/ with curve.json, then curve.png (a plotting failure is one
    line on stderr, the curve is already written; a full disk removes the directory, exit 2)."""
    import contextlib
    import json
    import shutil
    import sys

    from autotune.errors import write_failure
    from autotune.outputs.plots import plot_curve
    from autotune.outputs.run_dir import create_run_dir
    from autotune.plan.io import atomic_write_text

    new_root = not root.exists()
    run_dir = create_run_dir(root, curve.model, "curve")
    atomic_write_text(run_dir / "curve.json", json.dumps(record, indent=2, default=str) + "\n")
    files = {"run directory": str(run_dir), "curve.json": str(run_dir / "curve.json")}
    try:
        files["curve.png"] = str(plot_curve(curve, run_dir / "curve.png"))
    except Exception as err:  # noqa: BLE001  (the curve itself is written)
        failure = write_failure(err, path=run_dir / "curve.png")
        if failure is not None:  # a full disk: no run directory with half its files (and a torn png)
            shutil.rmtree(run_dir, ignore_errors=True)
            if new_root:  # made for this run: removed when empty again
                with contextlib.suppress(OSError):
                    root.rmdir()
            raise failure from None
        sys.stderr.write(f"autotune curve: curve.png not written: {type(err).__name__}: {err}\n")
    return files
