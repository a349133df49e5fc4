"""A plan as a torchtitan TOML job config (``--job.config_file``).

Target: torchtitan v0.2.2 (2026-02-20), the last release that reads TOML; its main branch moved to
Python config functions on 2026-02-23 with the same field names. Keys and choices are checked
against torchtitan/config/job_config.py of v0.2.2 (tests/data/frameworks/torchtitan_job_config_keys.tsv).

What torchtitan v0.2.2 does, and so what this export can express
(torchtitan/models/llama3/infra/parallelize.py, distributed/parallel_dims.py, pipeline_parallel.py):

- Models come from a registry by ``[model] name`` and ``flavor``; the dense one is Llama 3
  (RMSNorm, SwiGLU, RoPE, no biases, untied output). Other architectures are refused.
- Tensor parallelism always shards norms along the sequence (Megatron's sequence parallelism).
- Data parallelism is FSDP2 over ``data_parallel_shard_degree`` x cp (ZeRO-3, or ZeRO-2 with
  ``fsdp_reshard_after_forward = "never"``) or DDP over ``data_parallel_replicate_degree``, the
  latter only when it is the only parallelism. ZeRO-1 has no switch.
- Pipeline stages are listed as module names per model part; with ``Interleaved1F1B`` part
  ``c * pp + r`` is chunk ``c`` of rank ``r`` ("loop" style).
"""

from __future__ import annotations

import tomli_w

from autotune.outputs.export.common import (
    MAPPED_STAGE_FIELDS, ExportContext, ExportResult, check_mesh_order, export_context, header_lines, refuse,
    require_placements)
from autotune.plan.io import PlanFile
from autotune.spec.model import ModelSpec

__all__ = ["to_torchtitan", "llama_ffn_hidden", "model_parts"]

NAME = "torchtitan"
TARGET = "torchtitan v0.2.2 (73a0e6979, 2026-02-20): torchrun ... -m torchtitan.train --job.config_file FILE"
PLAN_FIELDS = ("overlap_tp_comm", "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm")
STAGE_FIELDS = (*MAPPED_STAGE_FIELDS, "dp_shard", "reshard_after_forward", "cp_comm")  # FSDP2/HSDP, CP rotation
CP_ROTATE = {"ring": "alltoall", "all_gather": "allgather"}  # its names: "alltoall" passes K/V around a ring
SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}
RECOMPUTE = {"none": "none", "full": "full", "selective": "selective", "selective_op": "selective"}
# Llama 3 flavours of torchtitan v0.2.2 (torchtitan/models/llama3/__init__.py, llama3_args):
# dim, n_layers, n_heads, n_kv_heads, ffn_dim_multiplier, multiple_of; vocab_size is the
# TransformerModelArgs default 128256 except for debugmodel (model/args.py).
LLAMA3_FLAVORS = {
    "debugmodel": (256, 6, 16, 16, None, 256, 2048),
    "8B": (4096, 32, 32, 8, 1.3, 1024, 128256),
    "70B": (8192, 80, 64, 8, 1.3, 4096, 128256),
    "405B": (16384, 126, 128, 8, 1.2, 4096, 128256),
}


def llama_ffn_hidden(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """FFN width of torchtitan's Llama FeedForward (llama3/model/model.py): 2/3 of 4 x dim,
    times the multiplier, rounded up to ``multiple_of``."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _flavor(model: ModelSpec) -> tuple[str, list[str]]:
    """The registry flavour of ``model``, or its name and a note on registering it."""
    llama_like = (model.has_attention and model.ffn_activation == "swiglu" and model.norm == "rmsnorm"
                  and model.position_embedding == "rotary" and not model.bias and not model.tied_embeddings)
    if not llama_like:
        raise refuse(NAME, "model", f"its dense model is Llama (RMSNorm, SwiGLU, RoPE, no bias, untied output); "
                                    f"{model.name} has {model.norm}, {model.ffn_activation}, "
                                    f"{model.position_embedding} positions, bias={model.bias}, "
                                    f"tied={model.tied_embeddings}")
    shape = (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads, model.ffn_hidden_size,
             model.vocab_size)
    for name, (dim, layers, heads, kv, mult, multiple, vocab) in LLAMA3_FLAVORS.items():
        if shape == (dim, layers, heads, kv, llama_ffn_hidden(dim, multiple, mult), vocab):
            return name, []
    base = int(2 * (4 * model.hidden_size) / 3)
    args = (f"dim={model.hidden_size}, n_layers={model.num_layers}, n_heads={model.num_heads}, "
            f"n_kv_heads={model.num_kv_heads}, vocab_size={model.vocab_size}, "
            f"ffn_dim_multiplier={model.ffn_hidden_size / base!r}, multiple_of={model.ffn_hidden_size}")
    return model.name, [f"torchtitan v0.2.2 has no llama3 flavor of this shape: add "
                        f"\"{model.name}\": TransformerModelArgs({args}) to llama3_args in "
                        "torchtitan/models/llama3/__init__.py"]


def model_parts(layer_counts: tuple[int, ...], vpp: int) -> list[list[str]]:
    """Module names of each model part (pp x vpp parts, "loop" order) of torchtitan's Llama."""
    pp = len(layer_counts)
    parts, first = [], 0
    for k in range(pp * vpp):
        n = layer_counts[k % pp] // vpp
        parts.append([f"layers.{i}" for i in range(first, first + n)])
        first += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def _data_parallel(ctx: ExportContext) -> dict:
    s = ctx.stage
    if s.dp * s.cp == 1:
        return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 1}
    if s.zero in (2, 3):  # FSDP2 over dp x cp (HSDP: shard over dp_shard, replicate the rest);
        # ZeRO-2 and reshard_after_forward=False keep the gathered weights through backward
        keep = s.zero == 2 or not s.reshard_after_forward
        return {"data_parallel_replicate_degree": s.dp // s.shard_degree, "data_parallel_shard_degree": s.shard_degree,
                "fsdp_reshard_after_forward": "never" if keep else "always"}
    if s.zero == 1:
        raise refuse(NAME, "stages.zero", "FSDP2 shards weights, gradients and optimizer states together; "
                                          "ZeRO-1 (optimizer states only) has no setting (use zero 2 or 3)")
    if s.cp > 1:
        raise refuse(NAME, "stages.zero", "with cp > 1 it always shards weights with FSDP over the cp ranks; "
                                          "zero 0 (replicated weights) has no setting (use zero 2 or 3)")
    if s.tp > 1 or ctx.plan.pp > 1:
        raise refuse(NAME, "stages.zero", "its DDP (zero 0) runs only as the sole parallelism "
                                          "('DDP has not supported > 1D parallelism'); use zero 2 or 3")
    return {"data_parallel_replicate_degree": s.dp, "data_parallel_shard_degree": 1}


def _moe_flavor(model: ModelSpec) -> tuple[str, str, list[str]]:
    """torchtitan v0.2.2's registry models with routed experts: deepseek_v3 (latent attention)
    and qwen3 (grouped-query attention, QK-norm); a flavour of this shape must be registered."""
    name = "deepseek_v3" if model.is_mla else "qwen3"
    return name, model.name, [
        f"register a {name} flavor \"{model.name}\" with {model.num_experts} experts, top-{model.num_experts_per_token}, "
        f"expert width {model.expert_ffn_hidden_size} and this model's dimensions in torchtitan/models/{name}/"
        "__init__.py" + ("" if model.is_mla else "; its qwen3 model adds QK-norm, which this spec may not have")]


def _expert_parallel(ctx: ExportContext) -> dict:
    """expert_parallel_degree and expert_tensor_parallel_degree (parallel_dims.py): etp is 1 or tp;
    ep borrows ranks from dp_shard x cp, and from tp too when etp is 1."""
    s = ctx.stage
    if not ctx.model.is_moe:
        return {}
    if s.etp not in (1, s.tp):
        raise refuse(NAME, "stages.etp", f"its expert tensor parallelism is 1 or tp={s.tp}, got etp={s.etp}")
    borrow = s.dp * s.cp * (s.tp if s.etp == 1 else 1)
    if borrow % s.ep:
        raise refuse(NAME, "stages.ep", f"ep={s.ep} must divide the {borrow} ranks it borrows from "
                                        "dp_shard x cp" + (" x tp" if s.etp == 1 else ""))
    return {"expert_parallel_degree": s.ep, "expert_tensor_parallel_degree": s.etp}


def _parallelism(ctx: ExportContext) -> dict:
    p, s = ctx.plan, ctx.stage
    if s.tp > 1 and not s.sequence_parallel:
        raise refuse(NAME, "stages.sequence_parallel", "its tensor parallelism always shards norms along the "
                                                       "sequence; tp > 1 without sequence parallelism has no setting")
    table = {**_data_parallel(ctx), "tensor_parallel_degree": s.tp, "context_parallel_degree": s.cp,
             "pipeline_parallel_degree": p.pp}
    if s.cp > 1:
        if s.cp_comm not in CP_ROTATE:
            raise refuse(NAME, "stages.cp_comm", "its context parallelism rotates K/V (allgather or ring); "
                                                 "all-to-all over heads (Ulysses) has no setting")
        table["context_parallel_rotate_method"] = CP_ROTATE[s.cp_comm]
    if s.tp > 1 and p.overlap_tp_comm:
        table["enable_async_tensor_parallel"] = True  # needs [compile] enable (tensor_parallel.py)
    table.update(_expert_parallel(ctx))
    rounds = max(1, p.num_microbatches // p.pp)  # torch's ScheduleInterleaved1F1B (flex_pp) needs M % rounds == 0
    if p.schedule == "interleaved" and p.num_microbatches % rounds:
        raise refuse(NAME, "num_microbatches", f"Interleaved1F1B runs {p.num_microbatches} micro-batches in "
                                               f"{rounds} equal rounds, which do not divide them")
    if p.pp > 1:
        table.update(pipeline_parallel_schedule=SCHEDULES[p.schedule],
                     pipeline_parallel_microbatch_size=p.micro_batch,
                     module_fqns_per_model_part=model_parts(ctx.layer_counts, p.vpp))
    return table


def _training(ctx: ExportContext) -> dict:
    p, s, w = ctx.plan, ctx.stage, ctx.workload
    if w.dtype in ("fp16", "nvfp4"):
        raise refuse(NAME, "workload.dtype", f"its mixed precision is bfloat16 or float32, with float8/mx "
                                             f"converters on the linears ({w.dtype} has no setting)")
    require_placements(ctx, {name: ("hbm", "host") for name in ("weights_in", "optimizer_in", "gradients_in")},
                       "its only offload is FSDP2's CPU offload of weights, gradients and optimizer states together")
    offloaded = {s.weights_in, s.optimizer_in, s.gradients_in}
    if "host" in offloaded and (offloaded != {"host"} or s.dp * s.cp == 1 or s.zero < 2):
        raise refuse(NAME, "stages.weights_in",
                     "FSDP2's CPU offload (training.enable_cpu_offload) moves weights, gradients and "
                     "optimizer states together, under FSDP (zero 2/3, dp x cp > 1)")
    # Without pipelining torchtitan accumulates gradients over global / (local x dp) micro-batches.
    local = p.micro_batch * (p.num_microbatches if p.pp > 1 else 1)
    return {"local_batch_size": local, "global_batch_size": p.global_batch, "seq_len": w.seq_len,
            "mixed_precision_param": "float32" if w.dtype == "fp32" else "bfloat16",
            "mixed_precision_reduce": "float32", "enable_cpu_offload": "host" in offloaded}


def _activation_checkpoint(ctx: ExportContext) -> tuple[dict, list[str]]:
    mode = RECOMPUTE[ctx.stage.recompute]
    if mode != "selective":
        return {"mode": mode}, []
    if ctx.stage.recompute == "selective_op":  # exactly its op-level policy
        return {"mode": "selective", "selective_ac_option": "op"}, []
    return {"mode": "selective", "selective_ac_option": "op"}, [
        "selective recomputation: torchtitan's op-level policy saves matmul and attention outputs and recomputes "
        "the rest, close to but not the same as Megatron's core-attention recomputation the estimate assumes"]


def to_torchtitan(plan_file: PlanFile) -> ExportResult:
    ctx = export_context(plan_file, NAME, plan_fields=PLAN_FIELDS, stage_fields=STAGE_FIELDS + ("ep", "etp"))
    check_mesh_order(ctx)  # its mesh is [pp, dp_replicate, dp_shard, cp, tp], tp innermost
    name, flavor, notes = _moe_flavor(ctx.model) if ctx.model.is_moe else ("llama3", *_flavor(ctx.model))
    checkpoint, ac_notes = _activation_checkpoint(ctx)
    config = {"job": {"description": f"autotune plan for {ctx.model.name} on {ctx.plan.gpus} GPUs"},
              "model": {"name": name, "flavor": flavor}, "training": _training(ctx),
              "parallelism": _parallelism(ctx), "activation_checkpoint": checkpoint}
    if ctx.workload.dtype in ("fp8", "fp8_rowwise"):  # torchao float8 training on the linears
        config["model"]["converters"] = ["quantize.linear.float8"]
        recipe = "tensorwise" if ctx.workload.dtype == "fp8" else "rowwise"
        config["quantize"] = {"linear": {"float8": {
            "recipe_name": recipe, "enable_fsdp_float8_all_gather": bool(ctx.workload.fp8_all_gather)}}}
    elif ctx.workload.dtype == "mxfp8":  # torchao MX training on the linears
        config["model"]["converters"] = ["quantize.linear.mx"]
        config["quantize"] = {"linear": {"mx": {"recipe_name": "mxfp8"}}}
    if config["parallelism"].get("enable_async_tensor_parallel"):
        config["compile"] = {"enable": True, "components": ["model", "loss"]}
    notes = notes + ac_notes
    header = "".join(f"# {line}\n" for line in header_lines(ctx, TARGET) + [f"note: {n}" for n in notes])
    return ExportResult(format="torchtitan", text=header + tomli_w.dumps(config), suffix=".toml", notes=tuple(notes))
