"""Time and memory of one pipeline stage with its intra-operator choices.

Per micro-batch a stage spends: forward and backward kernels (plus recomputation), exposed
tensor- and context-parallel collectives, pipeline sends, and ZeRO-3 parameter traffic that
compute does not hide. Per step it adds the exposed data-parallel gradient sync and the
optimizer. The pipeline module combines stages with the schedule's formula.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from autotune.cost.comm import GroupSpan, collective_time_s, level_time_s, tp_collective_bytes
from autotune.cost.compute import BlockTimes, block_times
from autotune.cost.context_parallel import cp_layer_comm_s, cp_step_overhead_s
from autotune.cost.memory import StageMemory
from autotune.cost.sharding import (dp_step_comm_s, grad_comm_bytes, keeps_fp8_params, overlap_penalty_s,
                                    overlapped_exposed_s, shard_groups, zero3_microbatch_comm_s)
from autotune.cost.zero3_calls import zero3_layer_traffic
from autotune.cost.quantize import amax_all_reduce_s
from autotune.cost.recompute_modules import early_stop_applies, early_stop_skipped_fwd_s, modules_fwd_s
from autotune.graph.operators import qkv_projection_indices
from autotune.graph.table import ModelTables
from autotune.plan.plan import StagePlan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import GEMM_OPERAND_BYTES, TrainingWorkload, compute_dtype

__all__ = ["StageContext", "StagePosition", "StageTime", "StageCost", "overlapped_exposed_s"]

# Stage costs take the layer count as a number or a numpy array: the search scores every layer
# count of a stage in one call (time and memory are affine in it, the gradient sync is not).

# Adam step, bytes moved per parameter: read+write fp32 master, m and v (24), read the fp32
# gradient (4), zero it (4), read it again for the global-norm clip (4), and write the 16-bit
# weights in mixed precision (2). Memory-bound (Megatron's fused multi-tensor Adam).
OPTIMIZER_BYTES_PER_PARAM = {"fp32": 36.0, "bf16": 38.0, "fp16": 38.0, "fp8": 38.0, "fp8_rowwise": 38.0, "mxfp8": 38.0, "nvfp4": 38.0}
OPTIMIZER_KERNELS = 4


@dataclass(frozen=True, kw_only=True)
class StageContext:
    """What all stages of a plan share. ``micro_batch`` may be an array of sizes (shape (k, 1))
    for the search; every stage quantity then broadcasts over it."""

    tables: ModelTables
    workload: TrainingWorkload
    runtime: Runtime
    cluster: ClusterSpec
    micro_batch: int
    num_microbatches: int
    vpp: int = 1
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    overlap_tp_backward: bool = True  # with overlap_tp_comm: the backward's TP collectives too
    overlap_p2p_comm: bool = True
    grad_bucket_bytes: float = 0.0


@dataclass(frozen=True, kw_only=True)
class StagePosition:
    """Where a stage sits in its pipeline."""

    inflight: float  # micro-batches whose activations it holds at its peak
    neighbors: int  # adjacent stages it sends to and receives from (0, 1 or 2)
    p2p_inter_node: bool | None  # None: whichever link sends faster (a floor over both, for the search's screens)
    first_gpu: int = 0


@dataclass(frozen=True, kw_only=True)
class StageTime:
    """Seconds. The first group is per micro-batch, the last two per step."""

    compute_s: float
    tp_comm_s: float
    cp_comm_s: float
    p2p_s: float
    zero3_comm_s: float
    offload_s: float
    dp_comm_s: float
    optimizer_s: float
    ep_comm_s: float = 0.0  # per micro-batch: expert-parallel all-to-all and expert-TP collectives (cost/moe.py)
    host_s: float = 0.0  # per micro-batch: the GPU waiting for the host to issue kernels (cost/host.py)

    @property
    def microbatch_s(self) -> float:
        return (self.compute_s + self.tp_comm_s + self.cp_comm_s + self.p2p_s + self.zero3_comm_s + self.offload_s
                + self.ep_comm_s + self.host_s)

    @property
    def step_tail_s(self) -> float:
        return self.dp_comm_s + self.optimizer_s


@dataclass(frozen=True, kw_only=True)
class StageCost:
    time: StageTime
    memory: StageMemory
    params_per_gpu: float
    fwd_s: float  # forward of one micro-batch (kernels only)
    bwd_s: float  # backward incl. recomputation (kernels only)


def _scalar(x: np.ndarray):
    """A block quantity: a float, or an array when the micro-batch is an array of sizes."""
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


@lru_cache(maxsize=4096)
def _cached_block(table, device, dtype: str, micro_batch: tuple, shape: tuple, tp: int, cp: int, sp: bool, recipe: str) -> BlockTimes:
    """Block times depend on these only: a search reuses them across a stage's recomputation, ZeRO and mesh choices. Shared, so read-only."""
    return _read_only(block_times(table, device, dtype, np.array(micro_batch).reshape(shape), tp, cp, sp, fp8_recipe=recipe))


def _block(ctx: StageContext, table, stage: StagePlan, dtype: str | None = None) -> BlockTimes:
    b = np.asarray(ctx.micro_batch)
    block = _cached_block(table, ctx.cluster.device, dtype or ctx.workload.dtype, tuple(b.ravel().tolist()), b.shape,
                          stage.tp, stage.cp, bool(stage.sequence_parallel), ctx.runtime.fp8_recipe)
    if isinstance(block.weight_cast_fwd_ops_s, float) or not ctx.runtime.reuse_weight_casts:
        return block  # nothing to reuse (as _reuse_weight_casts)
    n = np.asarray(ctx.num_microbatches)
    key = (id(block), n.shape, tuple(n.ravel().tolist()))  # the cached block lives in the entry: its id stays its own
    found = _REUSED_CASTS.get(key)
    if found is None:
        if len(_REUSED_CASTS) >= _REUSED_CASTS_KEPT:
            _REUSED_CASTS.pop(next(iter(_REUSED_CASTS)))  # the oldest
        found = _REUSED_CASTS[key] = (block, _read_only(_reuse_weight_casts(ctx, block)))
    return found[1]


def _read_only(blocks: BlockTimes) -> BlockTimes:
    for value in vars(blocks).values():
        if isinstance(value, np.ndarray) and value.flags.owndata:
            value.flags.writeable = False
    return blocks


# _reuse_weight_casts by block and micro-batch counts: a search asks for the same blocks at every
# position and choice of a stage size. Shared, so read-only, as the blocks themselves.
_REUSED_CASTS: dict = {}
_REUSED_CASTS_KEPT = 1024


def _reuse_weight_casts(ctx: StageContext, block: BlockTimes) -> BlockTimes:
    """Weights cast to the low-precision format once per step, not per micro-batch, where the
    runtime keeps the cast copy (Transformer Engine's ``is_first_microbatch``, which Megatron-Core's
    schedules set on a step's first micro-batch: TrainingWorkload.reuse_weight_casts)."""
    if isinstance(block.weight_cast_fwd_ops_s, float) or not ctx.runtime.reuse_weight_casts:
        return block  # no low-precision casts, or none reused
    n = np.maximum(np.asarray(ctx.num_microbatches, dtype=float), 1.0)
    if not np.any(n > 1.0):
        return block
    saved = (1.0 - 1.0 / n)[..., None] * block.weight_cast_fwd_ops_s if n.ndim else \
        (1.0 - 1.0 / n) * block.weight_cast_fwd_ops_s
    return replace(block, fwd_ops_s=block.fwd_ops_s - saved, weight_cast_fwd_ops_s=block.weight_cast_fwd_ops_s - saved)


def _blocks(ctx: StageContext, stage: StagePlan) -> dict[str, BlockTimes]:
    blocks = {"layer": _block(ctx, ctx.tables.layer, stage)}
    if stage.has_embedding and ctx.tables.embedding is not None:
        blocks["embedding"] = _block(ctx, ctx.tables.embedding, stage)
    if stage.has_head and ctx.tables.head is not None:
        # BF16 under FP8 recipes: Megatron-Core's output_layer is not a TE module; torchtitan's float8 skips "output"
        blocks["head"] = _block(ctx, ctx.tables.head, stage, compute_dtype(ctx.workload.dtype))
    return blocks


def _recompute_fwd_s(stage: StagePlan, layer: BlockTimes, table, early_stop: bool = False) -> float:
    """Forward seconds one layer of ``table`` runs again in backward (modules, early stop: cost/recompute_modules.py)."""
    if stage.recompute == "full":
        return _scalar(layer.fwd_s - (early_stop_skipped_fwd_s(layer, table) if early_stop else 0.0))
    if stage.recompute == "selective_op":  # torchtitan's _op_sac policy: every other matmul, no attention
        share = np.array([0.5 if k in ("gemm", "gemm_unaligned") else 0.0 if k in ("attention", "bmm") else 1.0 for k in table.kinds])
        return _scalar((layer.fwd_ops_s * share).sum(-1))
    return _scalar((layer.selective_fwd_s if stage.recompute == "selective" else 0.0)
                   + modules_fwd_s(stage, layer, table))


# The GEMM each TP collective borders (sequence parallelism): all-gather before the column-parallel
# QKV and FFN-up projections, reduce-scatter after the row-parallel output and FFN-down projections.
_TP_PAIRS = (("all_gather", "qkv_proj"), ("reduce_scatter", "out_proj"), ("all_gather", "ffn_up"), ("reduce_scatter", "ffn_down"))


def _overlapped_tp_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, act: float) -> float:
    """Exposed TP time per layer with --tp-comm-overlap: each collective is split into tp
    chunks pipelined against its neighbouring GEMM (forward) and the dgrad/wgrad GEMMs
    (backward), as Transformer Engine's userbuffers do (Wang et al. 2022, "Overlap
    communication with dependent computation via decomposition"). The first chunk stays
    exposed. No overlap contention (overlap_penalty_s): userbuffers' ring exchange and PyTorch's
    async TP move the chunks with copy engines, not SM kernels, beside compute-bound GEMMs.
    PyTorch's async TP (``overlap_tp_backward`` False) decomposes the forward graph's collectives
    only: its authors measured up to 29% / 20% faster forward passes but 8% end to end on Llama 3
    8B / 70B (He, Wright et al. 2024, "Introducing Async Tensor Parallelism in PyTorch"), what an
    exposed backward (about 2/3 of the step) leaves; its backward graph, recomputation included,
    runs the plain collectives."""
    names = ctx.tables.layer.names
    exposed = 0.0
    for op, gemm in _TP_PAIRS:
        # unfused Q, K, V: the gathered input feeds three GEMMs, which the chunks overlap together
        # (PyTorch's fused_all_gather_matmul takes every matmul of the gathered tensor)
        idx = qkv_projection_indices(names) if gemm == "qkv_proj" else [names.index(gemm)] if gemm in names else []
        if not idx:
            continue
        comm = collective_time_s(op, tp_collective_bytes(op, act, ctx.runtime, ctx.workload.dtype, ctx.tables.act_bytes), span, ctx.cluster)
        fwd_gemm, bwd_gemm = _scalar(layer.fwd_ops_s[..., idx].sum(-1)), _scalar(layer.bwd_ops_s[..., idx].sum(-1))
        fwd = np.maximum(comm / stage.tp, comm - fwd_gemm)
        in_backward = (2 if stage.recompute == "full" else 1)  # the backward, and the recomputed forward
        exposed = exposed + fwd + (np.maximum(comm / stage.tp, comm - bwd_gemm) + (in_backward - 1) * fwd
                                   if ctx.overlap_tp_backward else in_backward * (comm + _sp_layout_copy_s(ctx, act)))
    return exposed


def _tp_comm_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, n):
    """Megatron TP: per layer two collectives of the activation forward and two backward
    (all-reduce, or all-gather + reduce-scatter with sequence parallelism); full
    recomputation repeats the forward ones. Exposed unless overlapped (_overlapped_tp_s)."""
    return _tp_place_comm_s(ctx, stage, span, *_tp_layers_comm_s(ctx, stage, span, layer, n))


def _tp_layers_comm_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, n) -> tuple:
    """_tp_comm_s of the layers alone, wherever the stage sits, and one collective's seconds (None without TP)."""
    if stage.tp <= 1:
        return 0.0 * n, None
    cl, m = ctx.cluster, ctx.tables.model
    act = ctx.micro_batch * ctx.tables.seq_len / stage.cp * m.hidden_size * ctx.tables.act_bytes
    if stage.sequence_parallel:
        gather = collective_time_s("all_gather", tp_collective_bytes("all_gather", act, ctx.runtime, ctx.workload.dtype, ctx.tables.act_bytes), span, cl)
        one = gather + collective_time_s("reduce_scatter", act, span, cl) + 2 * _sp_layout_copy_s(ctx, act)
    else:
        one = collective_time_s("all_reduce", act, span, cl)
    if ctx.overlap_tp_comm and stage.sequence_parallel:
        total = n * _overlapped_tp_s(ctx, stage, span, layer, act)
    else:
        per_pass = 2 if m.has_attention else 1
        passes = 2 + (1 if stage.recompute == "full" else 0)
        total = n * per_pass * passes * one
    return total + n * amax_all_reduce_s(ctx.workload.dtype, ctx.runtime.fp8_recipe, stage, span, cl), one  # TE's scales before SP gathers


def _tp_place_comm_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layers_s, one):
    """_tp_layers_comm_s' ``layers_s`` plus the embedding's and head's collectives where the stage holds them
    (a new value: ``layers_s`` may be shared)."""
    m = ctx.tables.model
    if one is None or not m.has_embeddings:
        return layers_s
    total = layers_s
    if stage.has_embedding:
        total = total + one  # vocab-parallel embedding output
    if stage.has_head:
        tokens = ctx.micro_batch * ctx.tables.seq_len / stage.cp
        loss_ar = collective_time_s("all_reduce", tokens * 4.0, span, ctx.cluster)
        total = total + (one + 3 * loss_ar)  # logits input gradient; max, sum-exp and target logit
    return total


def _sp_layout_copy_s(ctx: StageContext, act) -> float:
    """A batch-first sequence-parallel collective's layout copy: PyTorch's functional collectives
    gather along dim 0, so a gather along the sequence (dim 1) is followed by a cat of the tp chunks
    and a reduce-scatter preceded by one (torch.distributed._functional_collectives, all_gather_tensor
    and reduce_scatter_tensor with gather/scatter dim != 0): the whole buffer read and written once.
    Megatron's sequence-first [s, b, h] activations gather along dim 0 and copy nothing."""
    if not ctx.runtime.sp_batch_first:
        return 0.0
    device = ctx.cluster.device
    return device.memory.time_s(2.0 * act) / device.kernel_efficiency


def _cp_comm_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, n):
    """Context-parallel exchange per micro-batch, by the stage's variant (cost/context_parallel.py)."""
    m = ctx.tables.model
    if stage.cp <= 1 or not m.has_attention:
        return 0.0 * n
    tokens = ctx.micro_batch * ctx.tables.seq_len
    width = ctx.tables.act_bytes / stage.tp
    attn = np.array([k in ("attention", "bmm") for k in ctx.tables.layer.kinds])
    comm = stage.cp_comm
    kv_dim = m.num_heads * m.head_dim if ctx.runtime.kv_heads_expanded else m.kv_dim
    per_layer = cp_layer_comm_s(
        ctx.cluster, comm, span, kv_bytes=tokens * 2 * kv_dim * width,
        qkv_local_bytes=tokens / stage.cp * (m.num_heads * m.head_dim + 2 * kv_dim) * width,
        out_local_bytes=tokens / stage.cp * m.num_heads * m.head_dim * width,
        fwd_attn_s=_scalar((layer.fwd_ops_s * attn).sum(-1)), bwd_attn_s=_scalar((layer.bwd_ops_s * attn).sum(-1)),
        recompute_forward=stage.recompute == "full", act_bytes=ctx.tables.act_bytes)
    overhead = cp_step_overhead_s(
        ctx.cluster.device, comm, stage.cp, local_out_elems=tokens / stage.cp * m.attn_out_width / stage.tp,
        kv_per_out=2 * kv_dim / m.attn_out_width, act_bytes=ctx.tables.act_bytes,
        recompute_forward=stage.recompute == "full", dtype=ctx.workload.dtype)
    return n * (per_layer + overhead)


def _p2p_s(ctx: StageContext, stage: StagePlan, pos: StagePosition, compute_s):
    """Activations forward and their gradients backward to each neighbour, one TP shard per
    rank (sequence parallelism, or Megatron's scatter-gather optimisation, SC'21 sec. 4.1).
    Overlapped sends (Megatron-Core's default) hide behind the next micro-batch's compute."""
    if pos.neighbors == 0:
        return 0.0 * compute_s
    if pos.p2p_inter_node is None:  # the lesser of the two links, element by element
        return np.minimum(*(_p2p_s(ctx, stage, replace(pos, p2p_inter_node=inter), compute_s) for inter in (False, True)))
    m = ctx.tables.model
    nbytes = ctx.micro_batch * ctx.tables.seq_len / stage.cp * m.hidden_size * ctx.tables.act_bytes / stage.tp
    link = ctx.cluster.inter_node if pos.p2p_inter_node else ctx.cluster.intra_node
    total = pos.neighbors * 2 * ctx.vpp * level_time_s("send_recv", nbytes, 2, link)
    if ctx.overlap_p2p_comm:
        share = min(1.0, ctx.cluster.intra_node.beta_s_per_byte / link.beta_s_per_byte) if link.beta_s_per_byte else 1.0
        return np.maximum(0.0, total - compute_s) + overlap_penalty_s(total, compute_s, share)
    return total + 0.0 * compute_s


def _sharding(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes):
    """Shard/replica groups and one layer's ZeRO traffic with its compute windows (cost/sharding.py, zero3_calls.py)."""
    table = ctx.tables.moe_layer if np.shape(getattr(layer, "fwd_ops_s", ()))[-1:] != (len(ctx.tables.layer),) else ctx.tables.layer
    groups, recompute = shard_groups(stage, span), _recompute_fwd_s(stage, layer, table, early_stop_applies(ctx))
    return groups, zero3_layer_traffic(ctx, stage.tp, groups, _scalar(layer.params_per_gpu), _gather_bytes(ctx),
                                       grad_comm_bytes(ctx.runtime, ctx.workload.dtype), _scalar(layer.fwd_s),
                                       _scalar(layer.bwd_s) + recompute, recompute)


def _gather_bytes(ctx: StageContext) -> float:
    """Bytes per parameter in a weight all-gather: the compute dtype's, or the FP8 copy's when
    FSDP gathers FP8 weights (torchao float8's enable_fsdp_float8_all_gather; its amax
    all-reduce is one small collective per step and left out) or the weights are kept in FP8."""
    if (ctx.runtime.fp8_all_gather and ctx.workload.dtype in GEMM_OPERAND_BYTES) or keeps_fp8_params(ctx.runtime, ctx.workload.dtype):
        return GEMM_OPERAND_BYTES[ctx.workload.dtype]
    return float(ctx.tables.act_bytes)


def _zero3_comm_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, n, sharding=None):
    """Exposed ZeRO-3/FSDP traffic per micro-batch (cost/sharding.py); ``sharding``: _sharding's
    result for these arguments when the caller has it."""
    if stage.zero < 3 or span.size <= 1:
        return 0.0 * n
    _, traffic = sharding or _sharding(ctx, stage, span, layer)
    return zero3_microbatch_comm_s(stage, traffic, n, ctx.overlap_param_gather)


def _dp_comm_s(ctx: StageContext, stage: StagePlan, span: GroupSpan, layer: BlockTimes, n, params, fwd_s, bwd_s,
               sharding=None):
    """Exposed data-parallel traffic per step (cost/sharding.py); ``sharding`` as _zero3_comm_s."""
    if span.size <= 1:
        return 0.0 * params
    # the layer's ZeRO-3 traffic is read only under ZeRO 3 (the first gather): below it, the groups alone
    groups, t = sharding or (_sharding(ctx, stage, span, layer) if stage.zero >= 3 else (shard_groups(stage, span), None))
    first_gather = 0.0
    if stage.zero >= 3 and not stage.reshard_after_forward:  # once per step, prefetched a layer ahead
        first_gather = (t.gather_s + n * (np.maximum(0.0, t.gather_s - t.fwd_s)
                                          + overlap_penalty_s(t.gather_s, t.fwd_s, t.share))
                        if ctx.overlap_param_gather else n * t.gather_s)
    return dp_step_comm_s(ctx.cluster, stage, groups, params=params, fwd_s=fwd_s, bwd_s=bwd_s,
                          num_microbatches=ctx.num_microbatches, gather_bytes_per_param=_gather_bytes(ctx),
                          grad_bytes_per_param=grad_comm_bytes(ctx.runtime, ctx.workload.dtype),
                          bucket_bytes=ctx.grad_bucket_bytes, overlap_grad=ctx.overlap_grad_reduce,
                          overlap_gather=ctx.overlap_param_gather, first_gather_s=first_gather)


def optimizer_bytes_per_param(ctx: StageContext, stage: StagePlan) -> float:
    """OPTIMIZER_BYTES_PER_PARAM less what eager PyTorch does not do: freed gradients are not zeroed
    (zero_grad(set_to_none=True) sets p.grad = None, torch/optim/optimizer.py), and autocast writes
    no 16-bit weight copy (each forward's casts are in the captured stream, graph/opstream.py)."""
    nbytes = OPTIMIZER_BYTES_PER_PARAM[ctx.workload.dtype]
    if ctx.runtime.grads_freed_each_step and stage.dp == 1:
        nbytes -= 4.0
    if ctx.tables.op_stream and ctx.workload.dtype in ("bf16", "fp16"):
        nbytes -= 2.0
    return nbytes


def _optimizer_s(ctx: StageContext, stage: StagePlan, params, shards: int):
    device = ctx.cluster.device
    local = params / (shards if stage.zero >= 1 else 1)
    nbytes = local * optimizer_bytes_per_param(ctx, stage)
    return device.memory.time_s(nbytes) / device.kernel_efficiency + (OPTIMIZER_KERNELS - 1) * device.memory.latency_s
