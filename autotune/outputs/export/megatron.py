"""A plan as Megatron-LM ``pretrain_gpt.py`` flags, one per line, ``#`` comments.

Target: Megatron-LM main at d98e8a64ddf3 (2026-08-22); every option name and choice is checked
against the parser of that commit (tests/data/frameworks/megatron_arguments.tsv). Run it as
``torchrun ... pretrain_gpt.py $(grep -v '^#' megatron.args)``.

Mapping (the option semantics are in megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py of that commit):

- Uneven pipeline stages: ``--decoder-first/last-pipeline-num-layers`` when only the first
  and last ranks differ (middle ranks split the rest evenly), else
  ``--pipeline-model-parallel-layout`` with one ``|``-separated entry per virtual stage
  (``E`` embedding, ``t`` layer, ``L`` loss; entry ``c * pp + r`` is chunk ``c`` of rank ``r``).
- ZeRO over the dp x cp group: 1 = ``--use-distributed-optimizer``; 2 and 3 = Megatron-FSDP
  (``--use-megatron-fsdp`` with sharding strategy ``optim_grads`` / ``optim_grads_params``).
- Recomputation: full = every layer (``uniform``, 1 layer per checkpoint); selective =
  Megatron's selective (core attention) recomputation.
"""

from __future__ import annotations

from autotune.cost.sharding import grad_comm_bytes
from autotune.errors import AutotuneError
from autotune.outputs.export.common import (
    MAPPED_STAGE_FIELDS, ExportContext, ExportResult, check_mesh_order, export_context, header_lines,
    recompute_block_count, refuse, require_placements)
from autotune.outputs.export.megatron_moe import (
    attention_detail_flags, expert_parallel_flags, moe_model_flags, position_embedding_type)
from autotune.outputs.schedule import interleaved_group_size
from autotune.plan.io import PlanFile

__all__ = ["to_megatron", "pipeline_layout"]

NAME = "Megatron-LM"
TARGET = "Megatron-LM pretrain_gpt.py, main at d98e8a64ddf3 (2026-08-22)"
PLAN_FIELDS = ("overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm", "overlap_p2p_comm",
               "grad_bucket_bytes")

Flag = tuple[str, str | None]
_ACTIVATION = {"gelu": [], "swiglu": [("--swiglu", None)]}
_NORM = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
_POSITION = {"learned": "learned_absolute", "rotary": "rope", "none": "none"}


def pipeline_layout(layer_counts: tuple[int, ...], vpp: int) -> str:
    """``--pipeline-model-parallel-layout`` for ``layer_counts`` layers per rank in ``vpp`` chunks."""
    pp = len(layer_counts)
    entries = []
    for k in range(pp * vpp):
        n = layer_counts[k % pp] // vpp
        body = "t" if n == 1 else f"t*{n}"
        entries.append(("E" if k == 0 else "") + body + ("L" if k == pp * vpp - 1 else ""))
    return "|".join(entries)


def _split_flags(ctx: ExportContext) -> list[Flag]:
    counts, vpp = ctx.layer_counts, ctx.plan.vpp
    if len(counts) == 1:
        return []
    if len(set(counts)) == 1:
        return [("--num-layers-per-virtual-pipeline-stage", str(counts[0] // vpp))] if vpp > 1 else []
    middle = counts[1:-1]
    if len(set(middle)) > 1:
        return [("--pipeline-model-parallel-layout", pipeline_layout(counts, vpp))]
    flags: list[Flag] = []
    if not middle or counts[0] != middle[0]:
        flags.append(("--decoder-first-pipeline-num-layers", str(counts[0])))
    if not middle or counts[-1] != middle[0]:
        flags.append(("--decoder-last-pipeline-num-layers", str(counts[-1])))
    if vpp > 1:  # uneven stages take the chunk count, not the chunk size (arguments.py)
        flags.append(("--num-virtual-stages-per-pipeline-rank", str(vpp)))
    return flags


def _interleave_flags(ctx: ExportContext) -> list[Flag]:
    """Micro-batch groups of the interleaved schedule: the default (pp) unless pp does not fit."""
    p = ctx.plan
    if p.schedule != "interleaved":
        return []
    try:
        group = interleaved_group_size(p.pp, p.num_microbatches)
    except AutotuneError as err:
        raise refuse(NAME, "num_microbatches", err.message) from None
    return [] if group == p.pp else [("--microbatch-group-size-per-virtual-pipeline-stage", str(group))]


def _parallel_flags(ctx: ExportContext) -> list[Flag]:
    p, s = ctx.plan, ctx.stage
    if s.cp > 1 and ctx.workload.seq_len % (2 * s.cp) != 0:
        raise refuse(NAME, "stages.cp", f"it needs seq_len divisible by 2 x cp = {2 * s.cp} "
                                        f"(load-balanced context parallelism), got {ctx.workload.seq_len}")
    flags: list[Flag] = [("--tensor-model-parallel-size", str(s.tp)), ("--pipeline-model-parallel-size", str(p.pp)),
                         ("--context-parallel-size", str(s.cp))]
    if s.sequence_parallel and s.tp > 1:
        flags.append(("--sequence-parallel", None))
        if p.overlap_tp_comm:  # needs sequence parallelism and Transformer Engine
            flags.append(("--tp-comm-overlap", None))
    if p.pp > 1 and not p.overlap_p2p_comm:
        flags.append(("--no-overlap-p2p-communication", None))
    return flags + expert_parallel_flags(ctx) + _split_flags(ctx) + _interleave_flags(ctx)


def _data_parallel_flags(ctx: ExportContext) -> list[Flag]:
    p, s = ctx.plan, ctx.stage
    if s.dp * s.cp == 1:  # the optimizer offload runs in the distributed optimizer, also over one rank
        return [("--use-distributed-optimizer", None)] if s.optimizer_in == "host" else []
    flags: list[Flag] = []
    if s.zero == 1:
        flags.append(("--use-distributed-optimizer", None))
    elif s.zero >= 2:
        strategy = "optim_grads" if s.zero == 2 else "optim_grads_params"
        flags += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", strategy),
                  ("--ckpt-format", "fsdp_dtensor")]  # Megatron-FSDP requires this checkpoint format
    if p.overlap_grad_reduce:
        flags.append(("--overlap-grad-reduce", None))
    if p.overlap_param_gather and s.zero >= 1:
        flags.append(("--overlap-param-gather", None))
    if p.grad_bucket_bytes > 0:  # --ddp-bucket-size counts gradient elements, not bytes
        flags.append(("--ddp-bucket-size", str(int(p.grad_bucket_bytes // grad_comm_bytes(ctx.runtime, ctx.workload.dtype)))))
    return flags


def _memory_flags(ctx: ExportContext) -> list[Flag]:
    s = ctx.stage
    require_placements(ctx, {"optimizer_in": ("hbm", "host"), "gradients_in": ("hbm", "host")},
                       "Megatron-LM offloads only the optimizer step and its states to the host "
                       "(--optimizer-cpu-offload); it has no training offload of weights or activations that "
                       "works with pipelining and recomputation, and no CXL placement")
    flags: list[Flag] = []
    if s.recompute == "selective_op":
        raise refuse(NAME, "stages.recompute", "torchtitan's op-level selective checkpointing has no flag "
                                               "(--recompute-granularity selective recomputes core attention)")
    if s.recompute == "selective":
        flags.append(("--recompute-granularity", "selective"))
    elif s.recompute == "full" and (count := recompute_block_count(ctx)):  # the first N layers of each stage
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                  ("--recompute-num-layers", str(count))]
    elif s.recompute == "full":
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", "1")]
    if s.activation_offload_layers:  # sets args.cpu_offloading (megatron/training/arguments.py:1950-1951 @d98e8a64)
        flags.append(("--cpu-offloading-num-layers", str(s.activation_offload_layers)))
    if s.optimizer_in == "host":
        if s.zero != 1:  # OptimizerConfig: the precision-aware optimizer needs the distributed optimizer
            raise refuse(NAME, "stages.optimizer_in", "its optimizer offload (--optimizer-cpu-offload) runs in the "
                                                      "distributed optimizer (zero 1), not with zero "
                                                      f"{s.zero}")
        flags += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", "1.0"),
                  ("--use-precision-aware-optimizer", None)]  # required by --optimizer-cpu-offload
    return flags


def _model_flags(ctx: ExportContext) -> list[Flag]:
    m = ctx.model
    if not m.has_attention:
        raise refuse(NAME, "model.layer_kind", f"{m.layer_kind!r} blocks (no attention) are not a Megatron GPT model")
    if m.ffn_activation not in _ACTIVATION:
        raise refuse(NAME, "model.ffn_activation", f"{m.ffn_activation!r} is not a Megatron MLP activation "
                                                   "(gelu, or --swiglu)")
    if m.position_embedding not in _POSITION:
        raise refuse(NAME, "model.position_embedding", f"{m.position_embedding!r} is not a Megatron position "
                                                       "embedding (learned_absolute, rope, none)")
    flags: list[Flag] = [("--num-layers", str(m.num_layers)), ("--hidden-size", str(m.hidden_size)),
                         ("--num-attention-heads", str(m.num_heads)), ("--ffn-hidden-size", str(m.ffn_hidden_size))]
    if m.num_kv_heads != m.num_heads:
        flags += [("--group-query-attention", None), ("--num-query-groups", str(m.num_kv_heads))]
    flags += _ACTIVATION[m.ffn_activation]
    position = position_embedding_type(m) or _POSITION[m.position_embedding]
    flags += [("--normalization", _NORM[m.norm]), ("--position-embedding-type", position)]
    if not m.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights", None))
    if not m.dropout:
        flags += [("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0")]
    return flags + _attention_flags(ctx) + attention_detail_flags(m) + moe_model_flags(m) + _vocab_flags(ctx)


def _bias_flags(m) -> list[Flag]:
    """Megatron has one switch for every linear bias (--disable-bias-linear) and one to add QKV
    biases back (--add-qkv-bias, Qwen2)."""
    qkv, out, ffn = (m.bias if v is None else v for v in (m.qkv_bias, m.attn_out_bias, m.ffn_bias))
    if out != ffn or (qkv != out and not qkv and out):
        raise refuse(NAME, "model.bias", f"it sets linear biases all on or all off, plus QKV biases; the model has "
                                         f"qkv={qkv}, attention output={out}, FFN={ffn}")
    flags: list[Flag] = [] if out else [("--disable-bias-linear", None)]
    return flags + ([("--add-qkv-bias", None)] if qkv and not out else [])


def _window_flags(m) -> list[Flag]:
    """Sliding windows: --window-size (left, right) in tokens before and after the query, so a
    window of W tokens including the query is (W - 1, 0); --window-attn-skip-freq says which
    layers (Megatron-Core transformer/utils.py is_layer_window_attention: with an integer N, the
    1-based layers not divisible by N, i.e. full attention every N-th; or a 0/1 list, 1 = windowed).
    Chunked attention (Llama 4) has no flag."""
    if not m.sliding_window:
        return []
    if m.window_kind == "chunked":
        raise refuse(NAME, "model.window_kind", "its windows slide (--window-size); the model attends within chunks")
    flags: list[Flag] = [("--window-size", f"{m.sliding_window - 1},0")]
    n = m.sliding_window_every
    if m.full_attention_every:
        flags.append(("--window-attn-skip-freq", str(m.full_attention_every)))
    elif n == 2:
        flags.append(("--window-attn-skip-freq", "2"))  # 1-based odd layers = 0-based layers 0, 2, 4, ...
    elif n > 2:
        pattern = ",".join("1" if i % n == 0 else "0" for i in range(m.num_layers))
        flags.append(("--window-attn-skip-freq", f"[{pattern}]"))
    return flags


def _attention_flags(ctx: ExportContext) -> list[Flag]:
    """What Megatron needs to build the same attention: RoPE base (its default is 10000, Llama 3
    uses 500000), head width, biases, per-head QK norm, attention sinks and sliding windows."""
    m = ctx.model
    flags = _bias_flags(m)
    if m.position_embedding == "rotary":
        if not float(m.rope_theta).is_integer():  # --rotary-base is an integer option
            raise refuse(NAME, "model.rope_theta", f"--rotary-base takes an integer, the model's base is {m.rope_theta}")
        flags.append(("--rotary-base", str(int(m.rope_theta))))
    if m.head_dim_size and m.head_dim_size * m.num_heads != m.hidden_size:
        flags.append(("--kv-channels", str(m.head_dim_size)))
    if m.qk_norm == "head":
        flags.append(("--qk-layernorm", None))
    elif m.qk_norm != "none":
        raise refuse(NAME, "model.qk_norm", f"its QK norm (--qk-layernorm) is per head; the model normalises {m.qk_norm}")
    if m.attention_sinks:  # a learned logit per head in the softmax's denominator (GPT-OSS)
        flags.append(("--softmax-type", "learnable"))
    return flags + _window_flags(m)


def _vocab_flags(ctx: ExportContext) -> list[Flag]:
    """Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by x tp (default
    128 x tp; arguments.py _vocab_size_with_padding); the largest power of two that leaves this
    vocabulary as it is, else 1 (padded to a multiple of tp, noted)."""
    tp, vocab = ctx.stage.tp, ctx.model.vocab_size
    divisor = next((d for d in (128, 64, 32, 16, 8, 4, 2, 1) if vocab % (d * tp) == 0), 1)
    return [("--make-vocab-size-divisible-by", str(divisor))]


def _step_flags(ctx: ExportContext) -> list[Flag]:
    w = ctx.workload
    flags: list[Flag] = [("--micro-batch-size", str(ctx.plan.micro_batch)),
                         ("--global-batch-size", str(ctx.plan.global_batch)), ("--seq-length", str(w.seq_len)),
                         ("--max-position-embeddings", str(ctx.model.max_seq_len)),
                         ("--attention-backend", "flash" if w.attention_impl == "flash" else "unfused")]
    if w.dtype in ("bf16", "fp16"):
        flags.append((f"--{w.dtype}", None))
    if ctx.stage.fp8 and w.dtype == "bf16":  # FP8 GEMMs, E4M3 forward / E5M2 gradients, per-tensor (delayed) scales
        flags.append(("--fp8-format", "hybrid"))
    flags += _low_precision_flags(ctx)
    if w.dtype != "fp16" and w.dtype != "fp32" and not ctx.runtime.grad_reduce_in_fp32:  # gradients accumulated and reduced in bf16
        flags.append(("--grad-reduce-in-bf16", None))
    return flags


# A low-precision workload's GEMM recipe as Megatron-LM names it (arguments.py --fp8-format/--fp8-recipe,
# --fp4-format/--fp4-recipe), BF16 elsewhere; the per-tensor recipe from TrainingWorkload.fp8_recipe.
_FP8_RECIPE = {"te_delayed": "delayed", "te_current": "tensorwise", "cast": "tensorwise"}


def _low_precision_flags(ctx: ExportContext) -> list[Flag]:
    w = ctx.workload
    if w.dtype not in ("fp8", "mxfp8", "nvfp4", "fp8_rowwise"):
        return []
    if w.dtype == "fp8_rowwise":
        raise refuse(NAME, "workload.dtype", "its FP8 recipes scale per tensor, per MX block or per 128-block "
                                             "(--fp8-recipe tensorwise, delayed, mxfp8, blockwise), not per row")
    if w.dtype == "nvfp4":
        return [("--bf16", None), ("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    flags = [("--bf16", None), ("--fp8-format", "hybrid" if w.dtype == "fp8" else "e4m3"),
             ("--fp8-recipe", _FP8_RECIPE[ctx.runtime.fp8_recipe] if w.dtype == "fp8" else "mxfp8")]
    if ctx.runtime.fp8_params:  # weights kept in FP8, gathered in FP8 (MXFP8 reuses the gradient buffer for it)
        flags.append(("--fp8-param-gather", None))
        flags += [("--reuse-grad-buf-for-mxfp8-param-ag", None)] if w.dtype == "mxfp8" else []
    return flags


def _benchmark_flags(ctx: ExportContext) -> list[Flag]:
    """Synthetic data and a short schedule, so the file runs as a throughput benchmark."""
    return [("--mock-data", None), ("--tokenizer-type", "NullTokenizer"), ("--vocab-size", str(ctx.model.vocab_size)),
            ("--train-iters", "100"), ("--lr", "0.0001"), ("--eval-iters", "0"), ("--log-throughput", None)]


def _notes(ctx: ExportContext) -> list[str]:
    s = ctx.stage
    notes = []
    if s.zero >= 2 and s.dp * s.cp > 1:
        notes.append("Megatron-FSDP needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1")
    elif s.tp > 1 or s.cp > 1:
        notes.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 "
                     "(Megatron-LM requires it with tp or cp > 1 before Blackwell)")
    if any(flag == "--microbatch-group-size-per-virtual-pipeline-stage" for flag, _ in _interleave_flags(ctx)):
        notes.append(f"{ctx.plan.num_microbatches} micro-batches do not split into groups of pp={ctx.plan.pp}: larger "
                     "groups keep more micro-batches in flight than the estimate (which assumes groups of pp)")
    if ctx.plan.overlap_tp_comm and s.sequence_parallel and s.tp > 1:
        notes.append("--tp-comm-overlap needs Transformer Engine (--transformer-impl transformer_engine, the default)")
    vocab = ctx.model.vocab_size
    if vocab % s.tp:
        padded = -(-vocab // s.tp) * s.tp
        notes.append(f"Megatron pads the vocabulary of {vocab} to {padded} (a multiple of tp={s.tp}); the estimate "
                     f"counts {vocab}")
    return notes


def to_megatron(plan_file: PlanFile) -> ExportResult:
    ctx = export_context(plan_file, NAME, plan_fields=PLAN_FIELDS, stage_fields=MAPPED_STAGE_FIELDS + ("ep", "etp", "recompute_layers", "fp8",
                                                                                        "activation_offload_layers"))
    check_mesh_order(ctx)  # Megatron-Core's rank order tp-cp-ep-dp-pp, fixed
    groups = [("parallelism", _parallel_flags(ctx)), ("data parallelism and sharding", _data_parallel_flags(ctx)),
              ("recomputation and offload", _memory_flags(ctx)), ("model", _model_flags(ctx)),
              ("batch, sequence and precision", _step_flags(ctx)),
              ("throughput run: replace with your data, tokenizer and schedule", _benchmark_flags(ctx))]
    notes = _notes(ctx)
    lines = [f"# {line}" for line in header_lines(ctx, TARGET) + [f"note: {n}" for n in notes]]
    for title, flags in groups:
        if flags:
            lines.append(f"# {title}")
            lines += [flag if value is None else f"{flag} {value}" for flag, value in flags]
    return ExportResult(format="megatron", text="\n".join(lines) + "\n", suffix=".args", notes=tuple(notes))
