"""``autotune export``: a run's plan as a Megatron-LM, torchtitan or DeepSpeed config."""

from __future__ import annotations

import argparse
import sys

from autotune.cli.common import print_json

__all__ = ["register", "run", "FORMATS"]

FORMATS = ("megatron", "torchtitan", "torchtitan-0.2", "deepspeed")  # autotune.outputs.export.FORMATS, without importing it

EXAMPLES = """examples:
  autotune export runs/20260101-120000-llama3-8b-64 --format megatron
  autotune export plan.json --format torchtitan --out llama3_8b.args
  autotune export plan.json --format torchtitan-0.2 --out llama3_8b.toml
  autotune export plan.json --format deepspeed --json

A plan the framework cannot run (stages of different sizes, an unsupported ZeRO stage or
offload...) is refused with the reason, exit code 2. Targets: Megatron-LM main (flags for
pretrain_gpt.py), torchtitan 0.3 (options for torchtitan.train; torchtitan-0.2: the TOML job
file of 0.2.x), DeepSpeed 0.19 (JSON). Each file says which version it is for.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write a plan as Megatron-LM flags, torchtitan options (0.3) or TOML (0.2), or a DeepSpeed JSON config",
        description="Write a plan as a config of the framework you train with.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", metavar="RUN|PLAN", help="a run directory or a plan file (plan.json)")
    parser.add_argument("--format", required=True, help=f"one of: {', '.join(FORMATS)}")
    parser.add_argument("--out", default=None, help="write the config to this file (default: print it)")
    parser.add_argument("--runtime", default=None,
                        help="the runtime settings to write (fp8 recipe, gradient reduction...): default the plan "
                             "file's own (megatron for files written before runtimes were recorded)")
    parser.add_argument("--json", action="store_true", help="print {format, text, notes, out} as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from autotune.outputs.export import export, write_export
    from autotune.plan.io import read_plan_file

    from autotune.plan.io import check_output_path

    if args.out:
        check_output_path(args.out)  # before reading and converting: nothing is done that cannot be written
    plan_file = read_plan_file(args.plan)
    if args.runtime:
        from dataclasses import replace

        from autotune.errors import require
        from autotune.spec.runtime import load_runtime

        runtime = load_runtime(args.runtime)
        training = plan_file.workload is None or plan_file.workload.kind == "train"
        require(not (training and runtime.serving is not None), "runtime", f"--runtime {runtime.name} is a serving "
                "engine; a training plan exports with a training runtime (autotune runtimes lists them)")
        plan_file = replace(plan_file, runtime=runtime)
    if args.out:
        path, result = write_export(plan_file, args.format, args.out)
    else:
        path, result = None, export(plan_file, args.format)
    if args.json:
        print_json({"runtime": (plan_file.runtime.name if plan_file.runtime else "megatron"),
                    "format": result.format, "text": result.text, "notes": list(result.notes),
                    "out": str(path) if path else None})
        return 0
    if path is None:
        sys.stdout.write(result.text)
    else:
        print(f"wrote {path}")
    if not result.notes_in_text or path is not None:
        for note in result.notes:
            sys.stderr.write(f"note: {note}\n")
    return 0
