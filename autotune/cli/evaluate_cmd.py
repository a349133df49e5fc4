"""``autotune evaluate``: score one plan given by its degrees (or a plan file)."""

from __future__ import annotations

import argparse
from autotune.spec.runtime import EP_DISPATCHERS, FP8_RECIPES, HOST_DISPATCH
from autotune.cli.common import (add_degree_args, add_model_args, add_workload_args, count, estimate_table, number,
                                 parser_defaults, positive_int, print_json, refuse_given)
from autotune.spec.workload import MAX_IMBALANCE, MAX_TARGET_S

__all__ = ["register", "run", "add_inference_args", "add_moe_args", "add_runtime_args", "check_workload_flags",
           "refuse_idle_flags", "runtime_from_args", "workload_from_args"]

MAX_TARGET_MS = MAX_TARGET_S * 1e3
_TARGET_WHY = "a service target of more than an hour is none"
_IMBALANCE_WHY = "0: model it; else the busiest expert-parallel rank's load over the mean, at most the ranks"

PLACEMENT_FLAGS = ("weights_in", "kv_cache_in", "activations_in", "gradients_in", "optimizer_in")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="predict step time and memory of a parallel plan",
                                   description="Predict step time, throughput, MFU and memory per GPU of a plan.")
    add_model_args(parser, gpus_required=False, model_required=False)
    add_workload_args(parser)
    add_inference_args(parser)
    add_moe_args(parser)
    add_degree_args(parser)
    add_memory_args(parser)
    add_sharding_args(parser)
    add_runtime_args(parser)
    parser.add_argument("--async-tp", action="store_true",
                        help="PyTorch's async TP: TP collectives overlapped in the forward pass only (torchtitan)")
    parser.add_argument("--recompute-modules", default=None,
                        help="comma-separated Megatron-Core modules recomputed in backward on top of --recompute none "
                             "or selective: core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe")
    parser.add_argument("--activation-offload-layers", type=count("num_layers", least=0), default=0,
                        help="training: offload the activations of the first N layers to host memory in forward, "
                             "reload them in backward (Megatron-Core --cpu-offloading-num-layers N; 0: none)")
    parser.add_argument("--plan", default=None,
                        help="a plan.json (from autotune search) instead of the degrees; its model, workload, runtime, "
                             "cluster and profile are used unless the flags give them")
    # None = not given: the plan file's, else train on dgx-h100 (resolved in _inputs)
    parser.set_defaults(func=run, workload=None, cluster=None)
    DEFAULTS.update(parser_defaults(parser))


DEFAULTS: dict[str, object] = {}
INFERENCE_ONLY = ("batch", "prompt_len", "output_len", "target_tpot_ms", "target_ttft_ms")
TRAINING_ONLY = ("global_batch", "seq_len", "activation_offload_layers", "qkv_fused", "param_gather_gbps", "host_dispatch",
                 "cuda_graph_scope", "recompute_early_stop", "reuse_weight_casts", "fp8_params", "grad_reduce", "overlap_ep_comm")
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
    parser.add_argument("--output-len", type=count("seq_len", least=0), default=0,
                        help="decode/serve: tokens generated per sequence")
    parser.add_argument("--target-tpot-ms", type=number(0.0, MAX_TARGET_MS, _TARGET_WHY), default=0.0,
                        help="serve: time-per-output-token target (0: none)")
    parser.add_argument("--target-ttft-ms", type=number(0.0, MAX_TARGET_MS, _TARGET_WHY), default=0.0,
                        help="serve: time-to-first-token target (0: none)")


def add_sharding_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cp-comm", default=None,
                        help="context-parallel exchange: ring (p2p, overlapped), all_gather or all_to_all (Ulysses); "
                             "default: the runtime's")
    parser.add_argument("--dp-shard", type=count("gpus", least=0), default=0,
                        help="HSDP: shard ZeRO/FSDP state over N data-parallel ranks, replicate over dp/N (0: all of dp)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--reshard-after-forward", dest="reshard_after_forward", action="store_true", default=None,
                       help="ZeRO-3/FSDP: free gathered weights after forward, gather again in backward (default: "
                            "the runtime's, which does unless it keeps them for pipelining)")
    group.add_argument("--no-reshard-after-forward", dest="reshard_after_forward", action="store_false",
                       help="ZeRO-3/FSDP: keep gathered weights for the step; gather and reduce once per step")


def add_runtime_args(parser: argparse.ArgumentParser) -> None:
    """--runtime and the settings of it a run may change (autotune.spec.runtime.Runtime); a setting
    not given is the runtime preset's."""
    parser.add_argument("--runtime", default=None,
                        help="what runs the plan: megatron (default), nemo, torchtitan, llm-foundry, deepspeed, torch, "
                             "transformers, meta, or a dated behaviour (megatron-2019, megatron-2021, deepspeed-2021); "
                             "`autotune runtimes` lists them with their sources")
    parser.add_argument("--unfused-qkv", dest="qkv_fused", action="store_false", default=None,
                        help="Q, K and V projections as three GEMMs (torchtitan, Hugging Face), not one")
    parser.add_argument("--recompute-early-stop", action="store_true", default=None,
                        help="full recomputation skips each block's FFN down projection and last residual add "
                             "(PyTorch's non-reentrant checkpoint: torchtitan, llm-foundry), not the whole layer")
    parser.add_argument("--recast-weights", dest="reuse_weight_casts", action="store_false", default=None,
                        help="low-precision recipes: cast the weights at every micro-batch's forward (torchao "
                             "float8, llm-foundry), not once per step (Transformer Engine under Megatron)")
    parser.add_argument("--fp8-recipe", choices=FP8_RECIPES, default=None,
                        help="how per-tensor fp8 casts run (cost/quantize.py): standalone casts (cast), Transformer "
                             "Engine's delayed (te_delayed) or current (te_current) scaling in Megatron-Core's layers")
    params = parser.add_mutually_exclusive_group()
    params.add_argument("--fp8-params", action="store_true", default=None,
                        help="fp8/mxfp8: weights kept only in FP8 and gathered in FP8 (Megatron --fp8-param-gather); "
                             "default: the runtime's")
    params.add_argument("--no-fp8-params", dest="fp8_params", action="store_false",
                        help="fp8/mxfp8: a BF16 copy of the weights is kept and gathered")
    parser.add_argument("--grad-reduce", choices=("fp32", "bf16"), default=None,
                        help="gradient buffers and data-parallel reductions in fp32 or the 16-bit dtype "
                             "(Megatron --grad-reduce-in-bf16)")
    parser.add_argument("--host-dispatch", choices=HOST_DISPATCH, default=None,
                        help="eager: price the GPU waiting for an eager PyTorch host to issue Megatron-Core's "
                             "kernels (docs/moe.md, Host dispatch); hidden: the host always runs ahead")
    parser.add_argument("--cuda-graph-scope", default=None,
                        help="comma-separated scopes replayed as CUDA graphs (attn, mlp, moe_router, moe_preprocess, "
                             "moe, full_iteration)")
    parser.add_argument("--ep-dispatcher", choices=EP_DISPATCHERS, default=None,
                        help="MoE token dispatch: alltoall (NCCL) or deepep (DeepEP / HybridEP)")
    parser.add_argument("--overlap-ep-comm", action="store_true", default=None,
                        help="MoE: Megatron's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm)")
    parser.add_argument("--compile", dest="eager_elementwise", action="store_false", default=None,
                        help="torch.compile (torchtitan --compile.enable): Inductor fuses each norm and activation "
                             "into one kernel; default: the runtime's (eager for torchtitan, torch, transformers)")
    parser.add_argument("--param-gather-gbps", type=number(0.0, 1e5, "0: the network's rate; no GPU gathers 1e5 GB/s"),
                        default=None,
                        help="ZeRO-3: the runtime's parameter-gather rate per GPU in GB/s where below the "
                             "network's (DeepSpeed of 2021: 21), 0: the network's")


# Flags of add_runtime_args and add_workload_args that set a Runtime field, with how to read them.
_RUNTIME_FLAGS = {"qkv_fused": None, "eager_elementwise": None, "recompute_early_stop": None, "reuse_weight_casts": None, "fp8_recipe": None,
                  "fp8_params": None, "host_dispatch": None, "ep_dispatcher": None, "overlap_ep_comm": None,
                  "fp8_all_gather": None, "grad_reduce": ("grad_reduce_in_fp32", lambda v: v == "fp32"),
                  "cuda_graph_scope": ("cuda_graph_scope", lambda v: tuple(s.strip() for s in v.split(",") if s.strip())),
                  "param_gather_gbps": ("param_gather_bytes_per_s", lambda v: v * 1e9)}


def refuse_idle_flags(args: argparse.Namespace, model, workload, runtime, plan=None) -> None:
    """A flag that would change nothing for this model, workload, runtime and plan is refused, not
    ignored (README): each (given, why it changes nothing, what would make it count)."""
    from autotune.errors import AutotuneError
    from autotune.spec.workload import LOW_PRECISION_DTYPES

    stage = plan.stages[0] if plan is not None else None
    zero3 = stage is None or stage.zero == 3
    checks = (
        ("cuda_graph_scope", runtime.host_dispatch != "eager", "replays scopes whose host issue is priced only with "
         "--host-dispatch eager (the megatron and nemo runtimes)"),
        ("fp8_recipe", workload.dtype not in LOW_PRECISION_DTYPES, f"acts only under an FP8 dtype, not {workload.dtype}"),
        ("fp8_params", workload.dtype not in ("fp8", "fp8_rowwise", "mxfp8"), f"acts only under fp8 or mxfp8, not {workload.dtype}"),
        ("fp8_all_gather", workload.dtype not in LOW_PRECISION_DTYPES, f"acts only under an FP8 dtype, not {workload.dtype}"),
        ("expert_load_imbalance", not model.is_moe, f"applies to mixtures of experts; {model.name} is dense"),
        ("ep_dispatcher", not model.is_moe, f"applies to mixtures of experts; {model.name} is dense"),
        ("overlap_ep_comm", not model.is_moe, f"applies to mixtures of experts; {model.name} is dense"),
        ("param_gather_gbps", not zero3, "prices ZeRO-3 parameter gathers; the plan's stages are not ZeRO 3"),
        ("dp_shard", stage is not None and (stage.zero != 3 or stage.dp_shard in (0, stage.dp)),
         "shards ZeRO-3 state over fewer than all data-parallel ranks: give --zero 3 and 1 < N < dp"),
    ) + (_plan_idle_checks(args, plan) if plan is not None else ())
    for dest, idle, why in checks:
        value = getattr(args, dest, None)
        if idle and value not in (None, False, 0, 0.0, ""):
            raise AutotuneError("--" + dest.replace("_", "-"), f"changes nothing here: it {why}")
    rate = getattr(args, "param_gather_gbps", None)
    if rate:
        from autotune.errors import require

        require(1e-3 <= rate < 1e5, "--param-gather-gbps", f"must be 0 (the network's rate) or a GPU's gather rate "
                                                           f"between 0.001 and 100000 GB/s, got {rate}")


def _plan_idle_checks(args: argparse.Namespace, plan) -> tuple:
    """The flags that act only on some plans: (dest, idle for this plan, why)."""
    tp1 = all(s.tp == 1 for s in plan.stages)
    return (
        ("cp_comm", all(s.cp == 1 for s in plan.stages), "chooses how context-parallel ranks exchange keys and "
         "values, and the plan has cp 1: give --cp N"),
        ("vpp", plan.pp == 1 and args.vpp not in (None, 1), "splits pipeline stages into virtual ones, and the plan "
         "has one stage (Megatron-Core's interleaved schedule needs pipeline parallelism): give --pp N"),
        ("sequence_parallel", tp1, "shards activations over tensor-parallel ranks, and the plan has tp 1: give --tp N"),
        ("async_tp", tp1, "overlaps tensor-parallel collectives, and the plan has tp 1: give --tp N"),
        ("overlap_tp_comm", tp1, "overlaps tensor-parallel communication, and the plan has tp 1: give --tp N"),
        ("recompute_early_stop", all(s.recompute == "none" and not s.recompute_modules for s in plan.stages),
         "ends recomputation early, and the plan recomputes nothing: give --recompute selective or full"),
    )


def runtime_from_args(args: argparse.Namespace, export_format: str | None = None, base=None):
    """The runtime --runtime names (or the one --export's format is for; else ``base``, a plan
    file's; else megatron) with the settings the flags give."""
    from autotune.errors import require
    from autotune.spec.runtime import EXPORT_RUNTIMES, resolve_runtime

    name = getattr(args, "runtime", None) or (EXPORT_RUNTIMES.get(export_format) if export_format else None)
    runtime = resolve_runtime(name) if name or base is None else base
    changes = {}
    for dest, how in _RUNTIME_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None or value is False and dest in ("fp8_all_gather",):
            continue
        field, convert = how or (dest, lambda v: v)
        changes[field] = convert(value)
    if "param_gather_bytes_per_s" in changes:
        require(changes["param_gather_bytes_per_s"] >= 0, "--param-gather-gbps",
                f"must be >= 0 GB/s (0: the network's rate), got {args.param_gather_gbps}")
    return runtime.with_changes(**changes) if changes else runtime


def add_moe_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expert-load-imbalance", type=number(0.0, MAX_IMBALANCE, _IMBALANCE_WHY), default=0.0,
                        help="MoE: the busiest expert-parallel rank's tokens over the mean, as measured "
                             "(default 0: the floor of unskewed routing, docs/moe.md)")


def add_memory_args(parser: argparse.ArgumentParser) -> None:
    for name in PLACEMENT_FLAGS:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, default="hbm", help=f"where {name[:-3].replace('_', ' ')} live: hbm, host or cxl")
    parser.add_argument("--cache-group-layers", type=count("num_layers", least=0), default=0,
                        help="layers per on-chip cache group (0: off)")
    parser.add_argument("--cache-tile-tokens", type=count("seq_len", least=0), default=0,
                        help="tokens per tile through a cache group")


def workload_from_args(args: argparse.Namespace, model: object, runtime, base=None) -> object:
    """The step the flags describe; attention as the runtime runs it unless --attention says. A
    field a flag does not give is ``base``'s (a plan file's workload of the same kind) if any."""
    from autotune.spec.resolve import inference_workload, training_workload
    from autotune.cli.common import resolve_dtype

    same = base is not None and base.kind == args.workload
    if args.dtype is None and same:
        args.dtype = base.dtype
    args.dtype = resolve_dtype(args)
    attention = args.attention or (base.attention_impl if same else runtime.attention_impl)
    if args.workload == "train":
        from dataclasses import replace

        work = training_workload(model, global_batch=args.global_batch or (base.global_batch if same else None),
                                 seq_len=args.seq_len or (base.seq_len if same else None), dtype=args.dtype,
                                 attention=attention)
        return replace(work, expert_load_imbalance=args.expert_load_imbalance)
    kept = (lambda flag, field: flag or (getattr(base, field) if same else flag))  # noqa: E731
    return inference_workload(model, args.workload, batch=kept(args.batch, "batch"),
                              prompt_len=kept(args.prompt_len, "prompt_len"), output_len=kept(args.output_len, "output_len"),
                              dtype=args.dtype, attention=attention,
                              target_tpot_s=kept(args.target_tpot_ms / 1e3, "target_tpot_s"),
                              target_ttft_s=kept(args.target_ttft_ms / 1e3, "target_ttft_s"))


def run(args: argparse.Namespace) -> int:
    from autotune.search.evaluate import evaluate
    from autotune.errors import require
    from autotune.outputs.serving_report import targets_dict
    from autotune.plan.io import read_plan_file
    from autotune.spec.summary import architecture_dict, architecture_line

    if args.plan:
        refuse_given(args, DEFAULTS, DEGREES, "shapes a plan built from degrees; --plan gives the whole plan")
    plan_file = read_plan_file(args.plan) if args.plan else None
    require(plan_file is not None or args.model is not None, "model", "give --model (a preset or a config.json), or --plan")
    require(plan_file is not None or args.gpus is not None, "gpus", "give --gpus (or --plan)")
    dtype_given, cluster_given = args.dtype is not None, args.cluster is not None
    model, workload, runtime, taken = _inputs(args, plan_file)
    priced, plan = (model, plan_file.plan) if plan_file else _degree_plan(args, model, workload, runtime)
    refuse_idle_flags(args, model, workload, runtime, plan)
    estimate = evaluate(priced, args.gpus, cluster=args.cluster, plan=plan, profile=args.profile, workload=workload,
                        runtime=runtime)
    assumed = assumed_defaults(args, workload, plan=None if args.plan else plan, dtype_given=dtype_given,
                               cluster_given=cluster_given, from_file=tuple(taken))
    if args.json:
        targets = {"targets": targets_dict(estimate.inference, workload)} if estimate.inference is not None else {}
        print_json({"runtime": runtime.to_dict(), **estimate.to_dict(), **targets, "model": architecture_dict(model),
                    "assumed": assumed, **({"from_plan_file": taken} if plan_file else {})})
    else:
        print(f"{architecture_line(model)}; runtime {runtime.name}")
        if taken:
            print(f"from {args.plan}: {', '.join(taken)} (flags override them)")
        print(estimate_table(estimate, workload))
        if assumed:
            print("assumed (not given): " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in assumed.items())
                  + "; give the flags to change them, or let autotune search choose the plan")
    return 0 if estimate.fits else 1


_WORKLOAD_FLAGS = ("workload", "global_batch", "seq_len", "batch", "prompt_len", "output_len", "target_tpot_ms",
                   "target_ttft_ms", "dtype", "attention", "expert_load_imbalance")
_RUNTIME_SETTINGS = ("runtime", *(dest for dest in ("qkv_fused", "eager_elementwise", "recompute_early_stop",
                                                      "reuse_weight_casts", "fp8_recipe", "fp8_params", "host_dispatch",
                                                      "ep_dispatcher", "overlap_ep_comm", "grad_reduce",
                                                      "cuda_graph_scope", "param_gather_gbps")))


def _inputs(args: argparse.Namespace, plan_file) -> tuple[object, object, object, list[str]]:
    """(model, workload, runtime, what was taken from the plan file): the flags where given, else
    the plan file's model, workload, runtime, cluster, profile and GPU count; without a file, the
    flags and their defaults (train, dgx-h100). Sets args.cluster/profile/gpus/workload."""
    from autotune.errors import require, require_choice
    from autotune.spec.presets import resolve_model
    from autotune.spec.resolve import DEFAULT_CLUSTER

    given = lambda name: getattr(args, name) != DEFAULTS.get(name)  # noqa: E731
    file = plan_file
    taken = [] if file is None else [name for name, flag in (("model", "model"), ("cluster", "cluster"),
                                                            ("profile", "profile"))
                                     if not given(flag) and getattr(file, name) is not None]
    if file is not None and file.workload is not None and not any(given(f) for f in _WORKLOAD_FLAGS):
        taken.append("workload")
    if file is not None and file.runtime is not None and not any(given(f) for f in _RUNTIME_SETTINGS):
        taken.append("runtime")
    model = resolve_model(file.model if "model" in taken else args.model)
    args.cluster = _file_cluster(file.cluster) if "cluster" in taken else (args.cluster or DEFAULT_CLUSTER)
    args.profile = file.profile if "profile" in taken else args.profile
    args.gpus = args.gpus or (file.plan.gpus if file else None)
    base = file.workload if file is not None else None
    args.workload = args.workload or (base.kind if base is not None else "train")
    require_choice("--workload", args.workload, ("train", "prefill", "decode", "serve"))
    check_workload_flags(args, DEFAULTS)
    runtime = runtime_from_args(args, base=file.runtime if file is not None else None)
    workload = base if "workload" in taken else workload_from_args(args, model, runtime, base=base)
    require(file is None or file.workload is not None or given("model"), "plan",
            "this plan file records no model or workload; give --model and the workload flags")
    return model, workload, runtime, taken


def _file_cluster(ref):
    """A plan file's cluster: a preset name, or a whole cluster recorded as {name, data}."""
    from autotune.spec.hardware_data import cluster_from_dict

    return cluster_from_dict(ref["name"], ref["data"]) if isinstance(ref, dict) else ref


def _degree_plan(args: argparse.Namespace, model, workload, runtime):
    """(the model as priced, the plan) the degree flags describe, the runtime's where a flag is not given."""
    from autotune.errors import require
    from autotune.plan.runtime_plan import runtime_plan

    require(args.gpus is not None, "gpus", "give --gpus (or --plan)")
    options = {name: getattr(args, name) for name in PLACEMENT_FLAGS}
    given = {"reshard_after_forward": args.reshard_after_forward, "cp_comm": args.cp_comm}
    if args.overlap_tp_comm is not None:
        given["overlap_tp_comm"] = args.overlap_tp_comm
    if args.async_tp:
        given.update(overlap_tp_comm=True, overlap_tp_backward=False)
    if args.no_overlap_grad_reduce:
        given["overlap_grad_reduce"] = False
    return runtime_plan(
        runtime, model, gpus=args.gpus, global_batch=workload.global_batch, training=args.workload == "train",
        dtype=workload.dtype,
        tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, vpp=args.vpp, micro_batch=args.micro_batch, zero=args.zero,
        recompute=args.recompute, sequence_parallel=args.sequence_parallel, schedule=args.schedule,
        recompute_layers=args.recompute_layers, cache_group_layers=args.cache_group_layers,
        cache_tile_tokens=args.cache_tile_tokens, dp_shard=args.dp_shard, ep=args.ep, etp=args.etp,
        activation_offload_layers=args.activation_offload_layers,
        recompute_modules=tuple(x.strip() for x in (args.recompute_modules or "").split(",") if x.strip()),  # None: not given
        **{k: v for k, v in given.items() if v is not None}, **options)


# Plan options evaluate fills in when they are not given are printed (issue 14, item 6: a silent
# micro-batch of 1 can make a plan look ten times slower than it is).
def assumed_defaults(args: argparse.Namespace, workload, *, plan, dtype_given: bool, cluster_given: bool,
                     from_file: tuple[str, ...] = ()) -> dict[str, object]:
    """Every default the evaluation used for an option the user did not give (nor the plan file,
    ``from_file``), as the plan built from the degrees has it (the runtime's ZeRO stage and
    micro-batch, dp as the GPUs left over...)."""
    given = lambda name: getattr(args, name, None) != DEFAULTS.get(name)  # noqa: E731
    out: dict[str, object] = {}
    if plan is not None:
        stage = plan.stages[0]
        used = {"micro_batch": plan.micro_batch, "recompute": stage.recompute, "zero": stage.zero, "pp": plan.pp,
                "cp": stage.cp, "vpp": plan.vpp, "dp": stage.dp, "schedule": plan.schedule,
                "sequence_parallel": "on" if stage.sequence_parallel else "off"}
        training_only = () if workload.kind == "train" else ("recompute", "zero", "vpp", "schedule")
        out.update({name: value for name, value in used.items() if not given(name) and name not in training_only})
    if not cluster_given and "cluster" not in from_file:
        out["cluster"] = args.cluster
    if "workload" in from_file:
        return out
    for name in ("global_batch", "seq_len") if workload.kind == "train" else ("batch", "prompt_len"):
        if not given(name):
            out[name] = getattr(workload, name)
    if not dtype_given:
        out["dtype"] = workload.dtype
    return out  # a plan that does not fit is a negative answer (README)
