"""``autotune evaluate``: score one plan given by its degrees (or a plan file)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from autotune.cli.common import (add_degree_args, add_model_args, add_workload_args, estimate_table, parser_defaults,
                                 positive_int, print_json, refuse_given)

if TYPE_CHECKING:
    from autotune.cost.estimate import Estimate

PLACEMENT_FLAGS = ("weights_in", "kv_cache_in", "activations_in", "gradients_in", "optimizer_in")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="predict step time and memory of a parallel plan",
                                   description="Predict step time, throughput, MFU and memory per GPU of a plan.")
    add_model_args(parser, gpus_required=False)
    add_workload_args(parser)
    add_inference_args(parser)
    add_moe_args(parser)
    add_degree_args(parser)
    add_memory_args(parser)
    add_sharding_args(parser)
    add_runtime_args(parser)
    parser.add_argument("--recompute-modules", default="",
                        help="comma-separated Megatron-Core modules recomputed in backward on top of --recompute none "
                             "or selective: core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe")
    parser.add_argument("--activation-offload-layers", type=int, default=0,
                        help="training: offload the activations of the first N layers to host memory in forward, "
                             "reload them in backward (Megatron-Core --cpu-offloading-num-layers N; 0: none)")
    parser.add_argument("--plan", default=None, help="a plan.json (from autotune search) instead of the degrees")
    parser.set_defaults(func=run)
    DEFAULTS.update(parser_defaults(parser))


DEFAULTS: dict[str, object] = {}
INFERENCE_ONLY = ("batch", "prompt_len", "output_len", "target_tpot_ms", "target_ttft_ms")
TRAINING_ONLY = ("global_batch", "seq_len", "activation_offload_layers", "unfused_qkv", "param_gather_gbps", "host_dispatch", "cuda_graph_scope",
                 "recompute_early_stop")
DEGREES = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "recompute", "recompute_layers", "recompute_modules", "activation_offload_layers", "sequence_parallel", "zero", "schedule",
           "overlap_tp_comm", "async_tp", "no_overlap_grad_reduce", "cache_group_layers", "cache_tile_tokens", *PLACEMENT_FLAGS)


def check_workload_flags(args: argparse.Namespace, defaults: dict[str, object]) -> None:
    """Flags of the other workload kind are refused, not ignored."""
    if args.workload == "train":
        refuse_given(args, defaults, INFERENCE_ONLY, "is for inference workloads (--workload prefill, decode or serve)")
    else:
        refuse_given(args, defaults, TRAINING_ONLY, f"is for training; --workload {args.workload} takes --batch and "
                                                   "--prompt-len")


def add_inference_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="train", help="train (default), prefill, decode or serve")
    parser.add_argument("--batch", "--concurrency", dest="batch", type=positive_int, default=None,
                        help="inference: sequences (concurrent requests) in the batch (preset default)")
    parser.add_argument("--prompt-len", type=positive_int, default=None, help="inference: prompt tokens per sequence (preset default)")
    parser.add_argument("--output-len", type=int, default=0, help="decode/serve: tokens generated per sequence")
    parser.add_argument("--target-tpot-ms", type=float, default=0.0, help="serve: time-per-output-token target")
    parser.add_argument("--target-ttft-ms", type=float, default=0.0, help="serve: time-to-first-token target")


def add_sharding_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cp-comm", default="ring",
                        help="context-parallel exchange: ring (p2p, overlapped), all_gather or all_to_all (Ulysses)")
    parser.add_argument("--dp-shard", type=int, default=0,
                        help="HSDP: shard ZeRO/FSDP state over N data-parallel ranks, replicate over dp/N (0: all of dp)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--reshard-after-forward", dest="reshard_after_forward", action="store_true", default=True,
                       help="ZeRO-3/FSDP: free gathered weights after forward, gather again in backward (default)")
    group.add_argument("--no-reshard-after-forward", dest="reshard_after_forward", action="store_false",
                       help="ZeRO-3/FSDP: keep gathered weights for the step; gather and reduce once per step")


def add_runtime_args(parser: argparse.ArgumentParser) -> None:
    """How the runtime runs the plan, where runtimes differ (cost/stage.py, cost/sharding.py)."""
    parser.add_argument("--async-tp", action="store_true",
                        help="PyTorch's async TP: TP collectives overlapped in the forward pass only (torchtitan)")
    parser.add_argument("--unfused-qkv", action="store_true",
                        help="Q, K and V projections as three GEMMs (torchtitan, Hugging Face), not one")
    parser.add_argument("--recompute-early-stop", action="store_true",
                        help="full recomputation skips each block's FFN down projection and last residual add "
                             "(PyTorch's non-reentrant checkpoint: torchtitan, llm-foundry), not the whole layer "
                             "(Megatron-Core, DeepSpeed)")
    parser.add_argument("--recast-weights", action="store_true",
                        help="low-precision recipes: cast the weights at every micro-batch's forward (torchao "
                             "float8, llm-foundry), not once per step (Transformer Engine under Megatron)")
    parser.add_argument("--fp8-recipe", choices=("cast", "te_delayed", "te_current"), default="cast",
                        help="how per-tensor fp8 casts run (cost/quantize.py): standalone casts taking their own amax "
                             "(torchao, te.Linear alone), or Transformer Engine's delayed / current scaling in "
                             "Megatron-Core's layers (norms and activations quantize their output; current scaling "
                             "adds an amax kernel and TP amax all-reduces)")
    parser.add_argument("--host-dispatch", choices=("hidden", "eager"), default="hidden",
                        help="eager: price the GPU waiting for an eager PyTorch host to issue Megatron-Core's "
                             "kernels (docs/moe.md, Host dispatch); hidden: the host always runs ahead")
    parser.add_argument("--cuda-graph-scope", default="",
                        help="with --host-dispatch eager: comma-separated scopes replayed as CUDA graphs "
                             "(attn, mlp, moe_router, moe_preprocess, moe, full_iteration)")
    parser.add_argument("--param-gather-gbps", type=float, default=0.0,
                        help="ZeRO-3: the runtime's parameter-gather rate per GPU in GB/s where below the "
                             "network's (DeepSpeed of 2021: 21), 0: the network's")


def add_moe_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expert-load-imbalance", type=float, default=0.0,
                        help="MoE: the busiest expert-parallel rank's tokens over the mean, as measured "
                             "(default 0: the floor of unskewed routing, docs/moe.md)")


def add_memory_args(parser: argparse.ArgumentParser) -> None:
    for name in PLACEMENT_FLAGS:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, default="hbm", help=f"where {name[:-3].replace('_', ' ')} live: hbm, host or cxl")
    parser.add_argument("--cache-group-layers", type=int, default=0, help="layers per on-chip cache group (0: off)")
    parser.add_argument("--cache-tile-tokens", type=int, default=0, help="tokens per tile through a cache group")


def _workload(args: argparse.Namespace, model: object) -> object:
    from autotune.spec.resolve import inference_workload, training_workload
    from autotune.cli.common import resolve_dtype

    args.dtype = resolve_dtype(args)
    if args.workload == "train":
        from dataclasses import replace

        work = training_workload(model, global_batch=args.global_batch, seq_len=args.seq_len, dtype=args.dtype,
                                 attention=args.attention)
        work = replace(work, expert_load_imbalance=getattr(args, "expert_load_imbalance", 0.0),
                       qkv_fused=not getattr(args, "unfused_qkv", False),
                       reuse_weight_casts=not getattr(args, "recast_weights", False),
                       recompute_early_stop=getattr(args, "recompute_early_stop", False),
                       fp8_recipe=getattr(args, "fp8_recipe", "cast"),
                       param_gather_bytes_per_s=getattr(args, "param_gather_gbps", 0.0) * 1e9,
                       host_dispatch=getattr(args, "host_dispatch", "hidden"),
                       cuda_graph_scope=tuple(s for s in getattr(args, "cuda_graph_scope", "").split(",") if s))
        fp8_gather = getattr(args, "fp8_all_gather", False)
        return replace(work, fp8_all_gather=True) if fp8_gather else work
    return inference_workload(model, args.workload, batch=args.batch, prompt_len=args.prompt_len,
                              output_len=args.output_len, dtype=args.dtype, attention=args.attention,
                              target_tpot_s=args.target_tpot_ms / 1e3, target_ttft_s=args.target_ttft_ms / 1e3)


def inference_lines(estimate: "Estimate") -> str:
    """TPS, TPOT, TTFT and the KV cache of an inference estimate."""
    from autotune.cli.common import fmt_bytes, fmt_s

    metrics = estimate.inference
    lines = [f"TPS            {metrics.tps:,.0f} tokens/s   (1/TPS {fmt_s(metrics.time_per_token_s)})"]
    if metrics.tpot_s is not None:
        lines.append(f"TPOT           {fmt_s(metrics.tpot_s)} per output token")
    if metrics.ttft_s is not None:
        lines.append(f"TTFT           {fmt_s(metrics.ttft_s)} (the batch's prefill)")
    lines.append(f"KV cache       {fmt_bytes(metrics.kv_cache_bytes_per_gpu)} per GPU, {fmt_bytes(metrics.kv_cache_bytes)} in all")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from autotune.search.evaluate import evaluate
    from autotune.errors import require, require_choice
    from autotune.plan.io import read_plan
    from autotune.spec.presets import resolve_model
    from autotune.spec.summary import architecture_dict, architecture_line

    require_choice("--workload", args.workload, ("train", "prefill", "decode", "serve"))
    require(args.param_gather_gbps >= 0, "--param-gather-gbps", f"must be >= 0 GB/s (0: the network's rate), "
                                                                 f"got {args.param_gather_gbps}")
    check_workload_flags(args, DEFAULTS)
    if args.plan:
        refuse_given(args, DEFAULTS, DEGREES, "shapes a plan built from degrees; --plan gives the whole plan")
    plan = read_plan(args.plan) if args.plan else None
    require(plan is not None or args.gpus is not None, "gpus", "give --gpus (or --plan)")
    model = resolve_model(args.model)
    options = {name: getattr(args, name) for name in PLACEMENT_FLAGS}
    dtype_given = args.dtype is not None
    workload = _workload(args, model)
    estimate = evaluate(
        model, args.gpus, cluster=args.cluster, plan=plan, profile=args.profile, workload=workload,
        tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, vpp=args.vpp, micro_batch=args.micro_batch,
        recompute=args.recompute, recompute_layers=args.recompute_layers, sequence_parallel=args.sequence_parallel,
        zero=args.zero, schedule=args.schedule, overlap_tp_comm=args.overlap_tp_comm or args.async_tp,
        overlap_tp_backward=not args.async_tp, overlap_grad_reduce=not args.no_overlap_grad_reduce,
        cache_group_layers=args.cache_group_layers, cache_tile_tokens=args.cache_tile_tokens,
        dp_shard=args.dp_shard, reshard_after_forward=args.reshard_after_forward, cp_comm=args.cp_comm,
        ep=args.ep, etp=args.etp, activation_offload_layers=args.activation_offload_layers,
        recompute_modules=tuple(x.strip() for x in args.recompute_modules.split(",") if x.strip()),
        **options)
    assumed = assumed_defaults(args, workload, plan_given=plan is not None, dtype_given=dtype_given)
    if args.json:
        print_json({**estimate.to_dict(), "model": architecture_dict(model), "assumed": assumed})
    else:
        print(architecture_line(model))
        print(estimate_table(estimate))
        if args.workload != "train":
            print(inference_lines(estimate))
        if assumed:
            print("assumed (not given): " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in assumed.items())
                  + "; give the flags to change them, or let autotune search choose the plan")
    return 0 if estimate.fits else 1


# Plan options evaluate fills in when they are not given (issue 14, item 6: a silent micro-batch
# of 1 can make a plan look ten times slower than it is).
_ASSUMED_PLAN = ("micro_batch", "recompute", "zero", "pp", "cp", "vpp", "dp", "schedule", "sequence_parallel")


def assumed_defaults(args: argparse.Namespace, workload, *, plan_given: bool, dtype_given: bool) -> dict[str, object]:
    """Every default the evaluation used for an option the user did not give, as used (the
    data-parallel degree as the GPUs left over, sequence parallelism as decided for the TP)."""
    given = lambda name: getattr(args, name, None) != DEFAULTS.get(name)  # noqa: E731
    out: dict[str, object] = {}
    if not plan_given:
        training_only = () if workload.kind == "train" else ("recompute", "zero", "vpp", "schedule")
        for name in _ASSUMED_PLAN:
            if not given(name) and name not in training_only:
                out[name] = getattr(args, name)
        if "dp" in out:
            out["dp"] = args.gpus // (args.tp * args.pp * args.cp)  # the rest of the GPUs
        if "schedule" in out:
            out["schedule"] = "interleaved" if args.vpp > 1 else "1f1b"
        if "sequence_parallel" in out:
            out["sequence_parallel"] = "on" if args.tp > 1 and workload.kind == "train" else "off"
    if not given("cluster"):
        out["cluster"] = args.cluster
    for name in ("global_batch", "seq_len") if workload.kind == "train" else ("batch", "prompt_len"):
        if not given(name):
            out[name] = getattr(workload, name)
    if not dtype_given:
        out["dtype"] = workload.dtype
    return out  # a plan that does not fit is a negative answer (README)
