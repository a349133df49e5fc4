"""A plan as a torchtitan job: what both targets share, and the current target (torchtitan 0.3).

torchtitan 0.3.0 (PyPI, 2026) dropped TOML job files: a job is a Python config function from a
model's ``config_registry`` chosen with ``--module``/``--config``, with ``--section.key value``
overrides parsed by tyro (torchtitan/config/manager.py). This export is that argument list, one
option per line with ``#`` comments, run as
``torchrun --nproc_per_node 8 -m torchtitan.train $(grep -v '^#' export-torchtitan.args)``.
The 0.2.x TOML file is the ``torchtitan-0.2`` format (:mod:`.torchtitan_toml`).

What torchtitan does, and so what the export can express (models/llama3, distributed/
parallel_dims.py, distributed/pipeline_parallel.py, config/configs.py):

- Models come from a registry by name and flavour; the dense one is Llama 3 (RMSNorm, SwiGLU,
  RoPE base 500000, no biases, untied output). Other architectures are refused.
- Data parallelism is FSDP2 over ``data_parallel_shard_degree`` x cp (ZeRO-3, or ZeRO-2 with
  ``fsdp_reshard_after_forward = never``) or DDP over ``data_parallel_replicate_degree``, the
  latter only when it is the only parallelism. ZeRO-1 has no switch.
- Pipeline stages are lists of module names per model part; with ``Interleaved1F1B`` part
  ``c * pp + r`` is chunk ``c`` of rank ``r`` ("loop" style).
"""

from __future__ import annotations

from autotune.outputs.export.common import (
    MAPPED_STAGE_FIELDS, ExportContext, ExportResult, check_mesh_order, export_context, header_lines, refuse,
    require_placements)
from autotune.outputs.export.torchtitan_moe import expert_parallelism, moe_config
from autotune.plan.io import PlanFile
from autotune.spec.model import ModelSpec

__all__ = ["to_torchtitan", "llama_ffn_hidden", "model_parts", "torchtitan_context", "llama_flavor", "Job"]

NAME = "torchtitan"
TARGET = "torchtitan 0.3.0 (PyPI): torchrun ... -m torchtitan.train $(grep -v '^#' FILE)"
PLAN_FIELDS = ("overlap_tp_comm", "overlap_tp_backward", "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm")
STAGE_FIELDS = (*MAPPED_STAGE_FIELDS, "dp_shard", "reshard_after_forward", "cp_comm",  # FSDP2/HSDP, CP rotation
                "ep", "etp")  # expert parallelism (torchtitan_moe.py)
SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}
# torch's context parallelism (torch/distributed/tensor/experimental/_context_parallel/_attention.py)
# all-gathers K/V unless told otherwise; 0.2 sets it (context_parallel_rotate_method), 0.3 has no setting.
CP_COMMS = ("ring", "all_gather")
# Llama 3 flavours (torchtitan/models/llama3/__init__.py, the same in 0.2.2 and 0.3.0): dim,
# n_layers, n_heads, n_kv_heads, ffn_dim_multiplier, multiple_of, vocab_size; RoPE theta 500000.
LLAMA3_FLAVORS = {
    "debugmodel": (256, 6, 16, 16, None, 256, 2048),
    "8B": (4096, 32, 32, 8, 1.3, 1024, 128256),
    "70B": (8192, 80, 64, 8, 1.3, 4096, 128256),
    "405B": (16384, 126, 128, 8, 1.2, 4096, 128256),
}
LLAMA3_ROPE_THETA = 500000.0
# torchtitan 0.3.0 config functions of those flavours (models/llama3/config_registry.py).
CONFIG_FUNCTIONS = {"debugmodel": "llama3_debugmodel", "8B": "llama3_8b", "70B": "llama3_70b", "405B": "llama3_405b"}

Job = dict  # section -> {key: value}, the torchtitan job both renderers write


def llama_ffn_hidden(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """FFN width of torchtitan's Llama feed-forward (compute_ffn_hidden_dim): 2/3 of 4 x dim,
    times the multiplier, rounded up to ``multiple_of``."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama_flavor(model: ModelSpec) -> str | None:
    """The registry flavour of ``model`` (None: no flavour of this shape); refuses non-Llama models."""
    llama_like = (model.has_attention and model.ffn_activation == "swiglu" and model.norm == "rmsnorm"
                  and model.position_embedding == "rotary" and not model.bias and not model.tied_embeddings
                  and not model.qkv_bias and not model.sliding_window and not model.num_experts
                  and not model.kv_lora_rank and model.rope_theta == LLAMA3_ROPE_THETA)
    if not llama_like:
        raise refuse(NAME, "model", f"its dense model is Llama 3 (RMSNorm, SwiGLU, RoPE base 500000, no bias, "
                                    f"full attention, untied output); {model.name} has {model.norm}, "
                                    f"{model.ffn_activation}, {model.position_embedding} positions "
                                    f"(base {model.rope_theta:g}), bias={model.bias}, qkv_bias={model.qkv_bias}, "
                                    f"window={model.sliding_window}, experts={model.num_experts}, "
                                    f"tied={model.tied_embeddings}")
    shape = (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads, model.ffn_hidden_size,
             model.vocab_size)
    for name, (dim, layers, heads, kv, mult, multiple, vocab) in LLAMA3_FLAVORS.items():
        if shape == (dim, layers, heads, kv, llama_ffn_hidden(dim, multiple, mult), vocab):
            return name
    return None


def flavor_args(model: ModelSpec) -> str:
    """The shape of ``model`` as torchtitan Llama arguments, for a note on registering it."""
    base = int(2 * (4 * model.hidden_size) / 3)
    return (f"dim={model.hidden_size}, n_layers={model.num_layers}, n_heads={model.num_heads}, "
            f"n_kv_heads={model.num_kv_heads}, vocab_size={model.vocab_size}, "
            f"ffn_dim_multiplier={model.ffn_hidden_size / base!r}, multiple_of={model.ffn_hidden_size}")


def model_parts(layer_counts: tuple[int, ...], vpp: int, head: str = "lm_head") -> list[list[str]]:
    """Module names of each model part (pp x vpp parts, "loop" order) of torchtitan's Llama;
    the output projection is ``lm_head`` in 0.3 and ``output`` in 0.2."""
    pp = len(layer_counts)
    parts, first = [], 0
    for k in range(pp * vpp):
        n = layer_counts[k % pp] // vpp
        parts.append([f"layers.{i}" for i in range(first, first + n)])
        first += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", head]
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


def _parallelism(ctx: ExportContext, head: str) -> dict:
    p, s = ctx.plan, ctx.stage
    table = {**_data_parallel(ctx), "tensor_parallel_degree": s.tp, "context_parallel_degree": s.cp,
             "pipeline_parallel_degree": p.pp}
    if s.cp > 1 and s.cp_comm not in CP_COMMS:
        raise refuse(NAME, "stages.cp_comm", "its context parallelism rotates K/V (allgather or ring); "
                                             "all-to-all over heads (Ulysses) has no setting")
    rounds = max(1, p.num_microbatches // p.pp)  # torch's ScheduleInterleaved1F1B needs M % rounds == 0
    if p.schedule == "interleaved" and p.num_microbatches % rounds:
        raise refuse(NAME, "num_microbatches", f"Interleaved1F1B runs {p.num_microbatches} micro-batches in "
                                               f"{rounds} equal rounds, which do not divide them")
    if ctx.model.is_moe:
        table.update(expert_parallelism(ctx, table["data_parallel_shard_degree"]))
    elif s.ep != 1 or s.etp != 1:
        raise refuse(NAME, "stages.ep", f"a dense model has no experts to place (ep={s.ep}, etp={s.etp})")
    if p.pp > 1:
        table.update(pipeline_parallel_schedule=SCHEDULES[p.schedule],
                     pipeline_parallel_microbatch_size=p.micro_batch,
                     module_fqns_per_model_part=model_parts(ctx.layer_counts, p.vpp, head))
    return table


def _training(ctx: ExportContext) -> dict:
    p, s, w = ctx.plan, ctx.stage, ctx.workload
    if w.dtype in ("fp16", "nvfp4"):
        raise refuse(NAME, "workload.dtype", f"its mixed precision is bfloat16 or float32, with float8/mx "
                                             f"converters on the linears ({w.dtype} has no setting)")
    if ctx.runtime.fp8_params and w.dtype in ("fp8", "mxfp8"):
        raise refuse(NAME, "runtime.fp8_params", "torchao's float8 keeps BF16 weights and casts them each step "
                                                 "(enable_fsdp_float8_all_gather casts before the gather)")
    if not ctx.runtime.grad_reduce_in_fp32:
        raise refuse(NAME, "runtime.grad_reduce_in_fp32", "FSDP2 reduces gradients in float32 only "
                                                           "(training.mixed_precision_reduce accepts 'float32')")
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


def torchtitan_context(plan_file: PlanFile, framework: str = NAME, extra_fields: tuple[str, ...] = ()) -> ExportContext:
    ctx = export_context(plan_file, framework, plan_fields=PLAN_FIELDS, stage_fields=STAGE_FIELDS + extra_fields)
    check_mesh_order(ctx)  # its mesh is [pp, dp_replicate, dp_shard, cp, tp], tp innermost
    return ctx


def job_sections(ctx: ExportContext, head: str) -> Job:
    """The sections both targets set: training and parallelism (keys as in both releases)."""
    return {"training": _training(ctx), "parallelism": _parallelism(ctx, head)}


def selective_note() -> str:
    return ("selective recomputation: torchtitan's op-level policy saves matmul and attention outputs and recomputes "
            "the rest, close to but not the same as Megatron's core-attention recomputation the estimate assumes")


def async_tp_notes(ctx: ExportContext) -> list[str]:
    """PyTorch's async TP overlaps the forward pass's TP collectives only (cost/stage.py)."""
    if not (ctx.stage.tp > 1 and ctx.plan.overlap_tp_comm and ctx.plan.overlap_tp_backward):
        return []
    return ["async TP overlaps the forward pass's TP collectives only; the estimate assumed the backward's "
            "overlapped too (overlap_tp_backward, Megatron's userbuffers): expect the backward's exposed"]


def _value(value) -> list[str]:
    if isinstance(value, bool):
        return []
    if isinstance(value, list):  # list[list[str]]: one comma-joined argument per part
        return [",".join(part) for part in value]
    return [str(value)]


def _option(section: str, key: str, value) -> str:
    name = f"--{section}.{key.replace('_', '-')}"
    if isinstance(value, bool):
        return name if value else f"--{section}.no-{key.replace('_', '-')}"
    return " ".join([name, *_value(value)])


def _overrides(ctx: ExportContext) -> tuple[Job, list[str]]:
    """Every section the plan sets, stated even where it equals the config function's default
    (the 70B and 405B functions set tp 8, compile and Float8 of their own)."""
    s = ctx.stage
    job = job_sections(ctx, "lm_head")
    job["parallelism"]["enable_sequence_parallel"] = bool(s.sequence_parallel and s.tp > 1)
    async_tp = bool(s.tp > 1 and s.sequence_parallel and ctx.plan.overlap_tp_comm)
    job["compile"] = {"enable": async_tp, "enable_async_tensor_parallel": async_tp}
    # 0.3 refuses CUDA graphs with pipelining, and with its standard all-to-all expert dispatcher,
    # which synchronises with the host for the token counts (Trainer.Config._validate_cuda_graphs)
    if ctx.plan.pp > 1 or s.ep > 1:
        job["training"]["disable_cuda_graphs"] = True
    notes = ([selective_note()] if s.recompute == "selective" else []) + async_tp_notes(ctx)
    if s.cp > 1 and s.cp_comm == "ring":
        notes.append("0.3 has no K/V rotation setting: torch's context parallelism all-gathers K/V, the plan "
                      "assumed a ring (cp_comm=all_gather is what runs; torchtitan-0.2 can set the ring)")
    if ctx.workload.dtype not in ("bf16", "fp32"):
        raise refuse(NAME, "workload.dtype", f"0.3 sets float8/MX training in Python config functions (converters), "
                                             f"not by an option; {ctx.workload.dtype} has none (the torchtitan-0.2 "
                                             "TOML sets it)")
    if ctx.workload.dtype == "bf16" and (s.dp * s.cp == 1 or s.zero == 0):
        notes.append("without FSDP, training.mixed_precision_param has no effect: torchtitan trains in "
                     "training.dtype (float32 unless set to bfloat16)")
    return job, notes


def _config_function(ctx: ExportContext, notes: list[str]) -> tuple[str, str]:
    """(module, config function) for ``--module``/``--config``; notes what a user must add."""
    if ctx.model.is_moe:
        return moe_config(ctx.model)
    flavor = llama_flavor(ctx.model)
    if flavor is None:
        config = f"llama3_{ctx.model.name.replace('-', '_').replace('.', '_')}"
        notes.insert(0, f"torchtitan 0.3 has no llama3 flavour of this shape: add a flavour with {flavor_args(ctx.model)} "
                        f"to llama3_configs (torchtitan/models/llama3/__init__.py) and a config function {config} "
                        "to models/llama3/config_registry.py")
    else:
        config = CONFIG_FUNCTIONS[flavor]
        if flavor == "405B":
            notes.append("llama3_405b converts linear layers to Float8; the estimate is for the workload's dtype")
    return "llama3", config


def to_torchtitan(plan_file: PlanFile) -> ExportResult:
    ctx = torchtitan_context(plan_file)
    notes: list[str] = []
    module, config = _config_function(ctx, notes)  # the model first: an unknown one is refused for that
    job, more = _overrides(ctx)
    notes += more
    lines = [f"# {line}" for line in header_lines(ctx, TARGET) + [f"note: {n}" for n in notes]]
    lines += [f"--module {module}", f"--config {config}"]
    for section, table in job.items():
        lines += [_option(section, key, value) for key, value in table.items()]
    mode = "selective" if ctx.stage.recompute == "selective_op" else ctx.stage.recompute
    lines.append(f"activation-checkpoint:{mode}")  # a subcommand: the last argument
    return ExportResult(format="torchtitan", text="\n".join(lines) + "\n", suffix=".args", notes=tuple(notes))
