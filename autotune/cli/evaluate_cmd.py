"""``autotune evaluate``: score one plan given by its degrees (or a plan file)."""

from __future__ import annotations

import argparse

from autotune.cli.common import add_degree_args, add_model_args, add_workload_args, estimate_table, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="predict step time and memory of a parallel plan",
                                   description="Predict step time, throughput, MFU and memory per GPU of a plan.")
    add_model_args(parser, gpus_required=False)
    add_workload_args(parser)
    add_degree_args(parser)
    parser.add_argument("--plan", default=None, help="a plan.json (from autotune search) instead of the degrees")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from autotune.api import evaluate
    from autotune.errors import require
    from autotune.plan.io import read_plan

    plan = read_plan(args.plan) if args.plan else None
    require(plan is not None or args.gpus is not None, "gpus", "give --gpus (or --plan)")
    estimate = evaluate(
        args.model, args.gpus, cluster=args.cluster, plan=plan, profile=args.profile, tp=args.tp, pp=args.pp,
        dp=args.dp, cp=args.cp, vpp=args.vpp, micro_batch=args.micro_batch, global_batch=args.global_batch,
        seq_len=args.seq_len, recompute=args.recompute, sequence_parallel=args.sequence_parallel,
        zero=args.zero, dtype=args.dtype, attention=args.attention, overlap_tp_comm=args.overlap_tp_comm,
        overlap_grad_reduce=not args.no_overlap_grad_reduce)
    if args.json:
        print_json(estimate.to_dict())
    else:
        print(estimate_table(estimate))
    return 0
