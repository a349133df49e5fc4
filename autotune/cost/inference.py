"""Inference stage cost: one micro-batch through a pipeline stage, in prefill or in decode.

Prefill runs a micro-batch's prompts forward once and writes their K and V to the KV cache.
A decode step feeds one token per sequence: every GEMM reads the stage's whole weight shard for
a handful of tokens, and attention reads each sequence's K/V history, so decode is bound by
memory bandwidth (Pope et al. 2022, "Efficiently Scaling Transformer Inference", sec. 2; the
roofline of seed 003 finds it without special cases). The KV cache holds, per layer and token,
K and V of ``num_kv_heads * head_dim`` each (GQA shrinks it; Ainslie et al. 2023).

``dense_inference_stage_cost`` returns the StageCost of autotune/cost/stage.py, so the search's stage
DP can plan inference as it plans training: ``time.microbatch_s`` is one micro-batch's pass
(prefill) or one decode step of it; ``memory.activations_bytes`` is the KV cache of one
micro-batch times ``pos.inflight`` (for inference: every micro-batch of the replica, whose
sequences all stay cached); ``temporary_bytes`` is the live activations of one micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from autotune.cost.cache import check_grouping, effective_group, grouped_block_times, tile_bytes_per_token
from autotune.cost.comm import GroupSpan, collective_time_s, level_time_s
from autotune.cost.compute import BlockTimes, block_times
from autotune.cost.decode_host import inference_host_s
from autotune.cost.memory import StageMemory
from autotune.cost.mesh import group_spans
from autotune.cost.offload import inference_offload, offloads
from autotune.cost.serving_ops import without_loss
from autotune.cost.stage import StageCost, StagePosition, StageTime
from autotune.errors import require
from autotune.graph.operator import Operator
from autotune.graph.operators import decode_attention, layer_operators, qkv_proj_width
from autotune.graph.opstream import explicit_mask_share, forward_live_bytes, stream_for
from autotune.graph.table import STREAM_DTYPES, ModelTables, OpTable, model_tables, stream_tables
from autotune.plan.plan import StagePlan
from autotune.spec.runtime import Runtime
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.workload import GEMM_OPERAND_BYTES, InferenceWorkload

__all__ = ["PHASES", "InferenceContext", "inference_context", "inference_tables", "decode_layer_table",
           "dense_inference_stage_cost", "check_inference_stage", "kv_bytes_per_token_layer",
           "workload_phases"]

PHASES = ("prefill", "decode")


def _set_op(table: OpTable, name: str, **values: float) -> OpTable:
    """``table`` with some per-operator values of operator ``name`` replaced."""
    i = table.names.index(name)
    changes = {}
    for key, value in values.items():
        array = getattr(table, key).copy()
        array[i] = value
        changes[key] = array
    return replace(table, **changes)


@lru_cache(maxsize=128)
def decode_layer_table(model: ModelSpec, context_len: float, act_bytes: int, cache_concat: bool = False) -> OpTable:
    """One layer for one new token per sequence attending over ``context_len`` positions.

    Attention per token: QK^T and AV over the context; it reads the token's Q, K, V and the K/V
    history (flash-decoding; Dao et al. 2023) and writes its output (see graph.decode_attention:
    sliding windows and latent attention included). ``cache_concat``: the runtime appends to
    its cache by copying it (Runtime.kv_cache_append), one more pass over the cached K and V.
    """
    base = model_tables(model, 1, act_bytes, "flash").layer
    if cache_concat and model.has_attention:
        cached = model.cached_positions(context_len) * model.kv_cache_elements_per_token_per_layer() * act_bytes
        new = model.kv_cache_elements_per_token_per_layer() * act_bytes
        base = OpTable.from_operators(list(layer_operators(model, 1, act_bytes, "flash")) + [Operator(
            name="kv_cache_concat", kind="elementwise", flops=0.0, model_flops=0.0, act_in_bytes=cached + new,
            act_out_bytes=cached + new, weight_bytes=0.0, params=0, saved_bytes=0.0, sharding="split")])
    return _decode_attention(base, model, context_len, act_bytes)


def _decode_attention(base: OpTable, model: ModelSpec, context_len: float, act_bytes: int) -> OpTable:
    if not model.has_attention:
        return base
    cost = decode_attention(model, context_len, act_bytes)
    return _set_op(base, "attention", flops=cost["flops"], model_flops=cost["flops"],
                   in_bytes=cost["in_bytes"], out_bytes=cost["out_bytes"], bwd_flops_factor=0.0)


def prefill_stream(model: ModelSpec, workload: InferenceWorkload, runtime: Runtime | None) -> str:
    """The runtime's captured prefill (profilers/opstreams.py: transformers' generate, bf16, every
    eager kernel) for this architecture, or "" (the hand-written graph prices the prefill)."""
    if runtime is None or not runtime.op_stream or workload.dtype not in STREAM_DTYPES \
            or workload.attention_impl != "flash":
        return ""
    return stream_for(model, f"{runtime.op_stream}-prefill")


def inference_tables(model: ModelSpec, workload: InferenceWorkload, phase: str, runtime: Runtime | None = None) -> ModelTables:
    """Block tables of a phase. The head computes logits for each sequence's last position only
    and samples instead of computing a loss. A runtime with a captured prefill prices its prefill
    from it (the kernels its own code issues)."""
    e = workload.activation_bytes
    stream = prefill_stream(model, workload, runtime) if phase == "prefill" else ""
    if stream:
        masked = explicit_mask_share(model, workload.prompt_len) if runtime.masks_windowed_attention else 0.0
        return stream_tables(model, workload.prompt_len, e, stream, runtime.qkv_fused, masked)
    one = model_tables(model, 1, e, "flash")
    if phase == "prefill":
        base = model_tables(model, workload.prompt_len, e, workload.attention_impl)
        layer = base.layer
    else:
        concat = runtime is not None and runtime.kv_cache_append == "concat"
        base, layer = one, decode_layer_table(model, workload.mean_decode_context_len, e, concat)
        if one.moe_layer is not None:  # an MoE layer's attention decodes the same way
            base = replace(base, moe_layer=_decode_attention(one.moe_layer, model, workload.mean_decode_context_len, e))
    head = None if one.head is None else without_loss(one.head)
    tables = replace(base, layer=layer, head=head)
    if workload.dtype not in GEMM_OPERAND_BYTES:
        return tables
    return replace(tables, layer=_prequantized(tables.layer, workload.dtype, e),
                   head=None if head is None else _prequantized(head, workload.dtype, e))


def _prequantized(table: OpTable, dtype: str, act_bytes: int) -> OpTable:
    """Inference in a low-precision format serves a pre-quantized checkpoint (FP8 per-tensor, NVFP4):
    its GEMM weights are stored and read at the format's bytes (ModelOpt/llm-compressor checkpoints,
    as vLLM, SGLang and TensorRT-LLM load them), activations stay in BF16."""
    gemm = np.array([k == "gemm" for k in table.kinds])
    return replace(table, weight_bytes=np.where(gemm, table.weight_bytes * GEMM_OPERAND_BYTES[dtype] / act_bytes,
                                                table.weight_bytes))


def weight_bytes_per_param(dtype: str, act_bytes: int) -> float:
    """Bytes a stored weight takes in inference: the format's for pre-quantized checkpoints."""
    return GEMM_OPERAND_BYTES.get(dtype, float(act_bytes))


def _without_weight_casts(times: BlockTimes) -> BlockTimes:
    """Pre-quantized weights are not cast per pass (only the activations are quantized)."""
    return replace(times, fwd_ops_s=times.fwd_ops_s - times.weight_cast_fwd_ops_s, weight_cast_fwd_ops_s=0.0)


def kv_bytes_per_token_layer(model: ModelSpec, act_bytes: int) -> float:
    """K and V of one token in one layer (whole, before TP splits the heads); MLA's latent."""
    return float(model.kv_cache_elements_per_token_per_layer()) * act_bytes


@dataclass(frozen=True, kw_only=True, eq=False)
class InferenceContext:
    """What all stages share in one phase. ``micro_batch`` (sequences) may be an array of sizes."""

    tables: ModelTables
    workload: InferenceWorkload
    runtime: Runtime
    cluster: ClusterSpec
    phase: str
    micro_batch: object
    num_microbatches: object

    def __post_init__(self) -> None:
        require(self.phase in PHASES, "phase", f"{self.phase!r}; choose one of: {', '.join(PHASES)}")

    @property
    def tokens_per_seq(self) -> int:
        """Tokens of each sequence a pass processes: the prompt, or one in decode."""
        return self.workload.prompt_len if self.phase == "prefill" else 1

    @property
    def kv_positions(self) -> int:
        """Positions per sequence the cache holds at its fullest."""
        return self.workload.max_context_len


def inference_context(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, phase: str, *,
                      runtime: Runtime, micro_batch: object, num_microbatches: object) -> InferenceContext:
    return InferenceContext(tables=inference_tables(model, workload, phase, runtime), workload=workload, runtime=runtime, cluster=cluster,
                            phase=phase, micro_batch=micro_batch, num_microbatches=num_microbatches)


def workload_phases(workload: InferenceWorkload) -> tuple[str, ...]:
    """The phases an inference workload runs: prefill unless it is decode alone, decode when it has steps."""
    phases = () if workload.kind == "decode" else ("prefill",)
    return phases + (("decode",) if workload.decode_steps > 0 else ())


def check_inference_stage(stage: StagePlan, phase: str) -> None:
    """Choices that mean nothing for inference are rejected, naming the field."""
    require(stage.zero == 0, "zero", "inference keeps no gradients or optimizer states; use zero=0")
    require(stage.recompute == "none", "recompute", "inference saves nothing for backward; use recompute=none")
    require(not stage.recompute_modules, "recompute_modules", "inference saves nothing for backward; recompute no modules")
    require(not stage.activation_offload_layers, "activation_offload_layers",
            "inference saves nothing for backward; offload no layers' activations")
    for name in ("optimizer_in", "gradients_in", "activations_in"):
        require(getattr(stage, name) == "hbm", name, "inference has no such tensors to offload; "
                "place weights_in or kv_cache_in instead")
    if phase == "decode":
        require(stage.cp == 1, "cp", "a decode step has one token per sequence: context parallelism needs cp=1")
        require(not stage.sequence_parallel, "sequence_parallel",
                "decode runs TP with all-reduces (one token per sequence); turn sequence parallelism off")


def _kv_out_share(table: OpTable, model: ModelSpec) -> np.ndarray:
    """Share of each operator's output that must reach HBM: K and V of the QKV projection."""
    share = np.zeros(len(table))
    if "qkv_proj" in table.names:
        share[table.names.index("qkv_proj")] = model.kv_cache_elements_per_token_per_layer() / qkv_proj_width(model)
    return share


def _blocks(ctx: InferenceContext, stage: StagePlan, n: object) -> dict[str, BlockTimes]:
    dev, dtype, t = ctx.cluster.device, ctx.workload.dtype, ctx.tables
    args = (ctx.micro_batch, stage.tp, stage.cp, stage.sequence_parallel)
    layer = _without_weight_casts(block_times(t.layer, dev, dtype, *args))
    if stage.cache_group_layers:
        check_grouping(t.layer, dev, tp=stage.tp, sequence_parallel=stage.sequence_parallel,
                       group_layers=effective_group(stage.cache_group_layers, n),
                       tile_tokens=stage.cache_tile_tokens, tokens_per_seq=ctx.tokens_per_seq)
        layer = grouped_block_times(
            layer, t.layer, dev, dtype, micro_batch=ctx.micro_batch, tp=stage.tp, cp=stage.cp,
            sequence_parallel=stage.sequence_parallel, group_layers=stage.cache_group_layers,
            tile_tokens=stage.cache_tile_tokens, num_layers=n, tokens_per_seq=ctx.tokens_per_seq,
            out_to_hbm=_kv_out_share(t.layer, t.model))
    blocks = {"layer": layer}
    if stage.has_embedding and t.embedding is not None:
        embedding = t.embedding if t.op_stream else model_tables(t.model, ctx.tokens_per_seq, t.act_bytes, "flash").embedding
        blocks["embedding"] = block_times(embedding, dev, dtype, *args)
    if stage.has_head and t.head is not None:  # one position per sequence, whatever the phase
        blocks["head"] = _without_weight_casts(block_times(t.head, dev, dtype, ctx.micro_batch, stage.tp, 1, False))
    return blocks


def _tp_comm_s(ctx: InferenceContext, stage: StagePlan, span: GroupSpan, n: object) -> object:
    """Forward-only Megatron TP: two collectives of the activation per layer (one without
    attention), one after the vocab-parallel embedding, and an all-gather of the logits."""
    if stage.tp <= 1:
        return 0.0 * n
    cl, m, e = ctx.cluster, ctx.tables.model, ctx.tables.act_bytes
    act = ctx.micro_batch * ctx.tokens_per_seq / stage.cp * m.hidden_size * e
    if stage.sequence_parallel:
        one = collective_time_s("all_gather", act, span, cl) + collective_time_s("reduce_scatter", act, span, cl)
    else:
        one = collective_time_s("all_reduce", act, span, cl)
    total = n * (2 if m.has_attention else 1) * one
    if stage.has_embedding and m.has_embeddings:
        total = total + one
    if stage.has_head and m.has_embeddings:
        total = total + collective_time_s("all_gather", ctx.micro_batch * m.vocab_size * e, span, cl)
    return total


def _cp_comm_s(ctx: InferenceContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, n: object) -> object:
    """Prefill under context parallelism: K and V go around the CP ring, overlapped with the
    attention blocks (Ring Attention, Liu et al. 2023), forward only."""
    m = ctx.tables.model
    if stage.cp <= 1 or not m.has_attention:
        return 0.0 * n
    kv = ctx.micro_batch * ctx.tokens_per_seq * kv_bytes_per_token_layer(m, ctx.tables.act_bytes) / stage.tp
    ring = collective_time_s("all_gather", kv, span, ctx.cluster)
    attn = np.array([k in ("attention", "bmm") for k in ctx.tables.layer.kinds])
    return n * np.maximum(0.0, ring - (layer.fwd_ops_s * attn).sum(-1))


def _p2p_s(ctx: InferenceContext, stage: StagePlan, pos: StagePosition) -> object:
    """The activation (one TP shard per rank) to the next stage. Each boundary's transfer is
    split between its two stages, so the stages' sum counts every boundary once."""
    if pos.neighbors == 0:
        return 0.0
    if pos.p2p_inter_node is None:  # the lesser of the two links (StagePosition)
        return np.minimum(*(_p2p_s(ctx, stage, replace(pos, p2p_inter_node=inter)) for inter in (False, True)))
    m = ctx.tables.model
    nbytes = ctx.micro_batch * ctx.tokens_per_seq / stage.cp * m.hidden_size * ctx.tables.act_bytes / stage.tp
    link = ctx.cluster.inter_node if pos.p2p_inter_node else ctx.cluster.intra_node
    return pos.neighbors / 2.0 * level_time_s("send_recv", nbytes, 2, link)


def _kv_bytes_per_layer(ctx: InferenceContext, stage: StagePlan, positions: float) -> object:
    """K/V bytes per GPU of one layer for one micro-batch over ``positions`` per sequence."""
    m = ctx.tables.model
    per_token = kv_bytes_per_token_layer(m, ctx.tables.act_bytes)
    return ctx.micro_batch * m.cached_positions(positions) * per_token / (m.kv_cache_shards(stage.tp) * stage.cp)


def _memory(ctx: InferenceContext, stage: StagePlan, blocks: dict[str, BlockTimes], n: object,
            params: object, inflight: float) -> StageMemory:
    """Weights, the KV cache of ``inflight`` micro-batches, and one micro-batch's live activations."""
    t, m = ctx.tables, ctx.tables.model
    kv = n * _kv_bytes_per_layer(ctx, stage, ctx.kv_positions) if m.has_attention else 0.0 * n
    tokens = ctx.micro_batch * ctx.tokens_per_seq / stage.cp
    if t.op_stream:  # the runtime's captured forward: what it holds alive (graph/opstream.py)
        per_seq, fixed = forward_live_bytes(t.op_stream, m, t.seq_len)
        live = (per_seq * ctx.micro_batch + fixed) / (stage.tp * stage.cp)
    else:
        live = tile_bytes_per_token(t.layer, t.seq_len, stage.tp, stage.sequence_parallel) * tokens
    if "head" in blocks:
        live = np.maximum(live, ctx.micro_batch * m.vocab_size * (t.act_bytes + 4.0) / stage.tp)
    return StageMemory(weights_bytes=params * weight_bytes_per_param(ctx.workload.dtype, t.act_bytes), gradients_bytes=0.0 * params, optimizer_states_bytes=0.0,
                       activations_bytes=kv * inflight, temporary_bytes=live,
                       reserved_bytes=ctx.cluster.device.reserved_bytes)


def dense_inference_stage_cost(ctx: InferenceContext, stage: StagePlan, pos: StagePosition,
                               num_layers: object = None) -> StageCost:
    """Time of one micro-batch (prefill) or one decode step of it through a dense ``stage``, and
    the stage's memory with ``pos.inflight`` micro-batches cached. ``num_layers`` (a number or an
    array) overrides the stage's layer count, as in stage_cost (autotune.cost.contract)."""
    check_inference_stage(stage, ctx.phase)
    n = stage.num_layers if num_layers is None else num_layers
    blocks = _blocks(ctx, stage, n)
    layer = blocks["layer"]
    others = [b for k, b in blocks.items() if k != "layer"]
    fwd = n * layer.fwd_s + sum(b.fwd_s for b in others)
    params = n * layer.params_per_gpu + sum(b.params_per_gpu for b in others)
    spans = group_spans(stage.mesh_order, stage.tp, stage.cp, stage.dp, ctx.cluster.gpus_per_node, pos.first_gpu)
    zero = 0.0 * fwd
    tp_s, cp_s = _tp_comm_s(ctx, stage, spans["tp"], n) + zero, _cp_comm_s(ctx, stage, spans["cp"], layer, n) + zero
    host_s = inference_host_s(ctx, stage, n, fwd + tp_s + cp_s, with_head="head" in blocks) + zero  # decode_host.py
    time = StageTime(compute_s=fwd, tp_comm_s=tp_s, cp_comm_s=cp_s, p2p_s=_p2p_s(ctx, stage, pos) + zero,
                     zero3_comm_s=zero, offload_s=zero, dp_comm_s=zero, optimizer_s=zero, host_s=host_s)
    memory = _memory(ctx, stage, blocks, n, params, pos.inflight)
    if offloads(stage):
        positions = ctx.workload.mean_decode_context_len if ctx.phase == "decode" else ctx.tokens_per_seq
        time, memory = inference_offload(ctx.cluster, stage, time, memory, layer_compute_s=layer.fwd_s,
                                         kv_bytes_per_layer=_kv_bytes_per_layer(ctx, stage, positions), num_layers=n,
                                         num_microbatches=ctx.num_microbatches)
    return StageCost(time=_plain_fields(time), memory=_plain_fields(memory), params_per_gpu=_plain(params),
                     fwd_s=_plain(fwd), bwd_s=_plain(zero))


def _plain(x: object) -> object:
    """0-d arrays become floats (estimates are JSON); arrays from the search stay arrays."""
    array = np.asarray(x, dtype=float)
    return float(array) if array.ndim == 0 else array


def _plain_fields(obj: object) -> object:
    return replace(obj, **{f.name: _plain(getattr(obj, f.name)) for f in fields(obj)})
