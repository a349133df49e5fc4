"""A dense training stage's time and memory (the terms of cost/stage.py), with the part that no
data-parallel choice changes kept across calls.

Kernels, TP and CP collectives, pipeline sends, host issue and saved activations depend on the
stage's tensor and context parallelism, its recomputation, position and layer count, not on its
data-parallel degree or ZeRO sharding; the gradient sync, ZeRO traffic, optimizer and sharded
state do. A search prices one stage choice at many degrees (each GPU count of a model has its own:
dp = GPUs / (submesh x stages)) and the baselines score one TP x PP stage at many, so that part is
made once per (blocks, context, stage less its data-parallel fields, position, TP/CP spans, layer
counts) and only the rest per call. Same operations on the same values: the results are the ones
pricing everything afresh gives (tests/test_cost_memos.py).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from autotune.cost import stage as st
from autotune.cost import stage_activations as sa
from autotune.cost.cache import training_grouped_layer
from autotune.cost.compute import BlockTimes
from autotune.cost.host import layers_host_s
from autotune.cost.memory import StageMemory
from autotune.cost.mesh import group_spans
from autotune.cost.offload import layer_offload, offloads, training_offload
from autotune.cost.recompute_modules import early_stop_applies
from autotune.cost.sharding import sharded_state_memory, state_flags
from autotune.errors import require
from autotune.plan.plan import StagePlan

__all__ = ["dense_stage_cost", "dense_stage_memory"]

# StagePlan fields the kept part does not read: where the layers start (only their count), the
# GPUs, the data-parallel degree and how state is sharded over it (ZeRO-3's gathered-layer buffers
# are added per call)
_DATA_PARALLEL_FIELDS = frozenset({"layers", "num_gpus", "dp", "zero", "dp_shard", "reshard_after_forward"})
_FIELD_NAMES = tuple(StagePlan.__dataclass_fields__)
_KEPT_FIELDS = itemgetter(*(i for i, name in enumerate(_FIELD_NAMES) if name not in _DATA_PARALLEL_FIELDS))


def _stage_key(stage: StagePlan) -> tuple:
    """The stage's fields but _DATA_PARALLEL_FIELDS (its instance dict holds its fields in order)."""
    fields = vars(stage)
    if len(fields) == len(_FIELD_NAMES):
        return _KEPT_FIELDS(tuple(fields.values()))
    return tuple(v for k, v in fields.items() if k not in _DATA_PARALLEL_FIELDS)


@dataclass(frozen=True, kw_only=True)
class _Kept:
    """A stage's data-parallel-free terms (arrays read-only: shared by every result made from them)."""

    layer: BlockTimes
    fwd_s: object
    bwd_s: object
    params: object
    tp_comm_s: object
    cp_comm_s: object
    p2p_s: object
    host_s: object
    saved_bytes: object
    working_bytes: object  # temporary bytes less ZeRO-3's gathered layers


_KEPT: OrderedDict = OrderedDict()  # key -> (what the key names by identity, _Kept, bytes)
_KEPT_BYTES = [0]
_KEPT_MAX_BYTES = 64 * 2**20  # a few hundred stage tables of a large model's layer counts


def _value_key(x) -> object:
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype.str, x.tobytes()
    return type(x), x


def _key(ctx, stage: StagePlan, pos, n, blocks: dict, spans: dict) -> tuple:
    """What the kept terms read: the blocks (which hold the device, dtype, micro-batch sizes,
    degrees and, where weight casts are reused, the micro-batch counts) and the large context
    parts by identity, the rest (the workload too: each query makes its own) by value."""
    return (tuple((name, id(b)) for name, b in blocks.items()), id(ctx.tables), ctx.workload, id(ctx.runtime),
            id(ctx.cluster), _value_key(ctx.micro_batch), ctx.vpp, ctx.overlap_tp_comm, ctx.overlap_tp_backward,
            ctx.overlap_p2p_comm, _stage_key(stage),
            pos.neighbors, pos.p2p_inter_node, spans["tp"], spans["cp"], _value_key(n))


def _kept(ctx, stage: StagePlan, pos, n, spans: dict) -> _Kept:
    blocks = st._blocks(ctx, stage)
    key = _key(ctx, stage, pos, n, blocks, spans)
    found = _KEPT.get(key)
    if found is not None:
        _KEPT.move_to_end(key)
        return found[1]
    kept = _price_kept(ctx, stage, pos, n, blocks, spans)
    size = sum(np.asarray(v).nbytes for k, v in vars(kept).items() if k != "layer")
    _KEPT[key] = ((ctx.tables, ctx.runtime, ctx.cluster, tuple(blocks.values())), kept, size)
    _KEPT_BYTES[0] += size
    while _KEPT_BYTES[0] > _KEPT_MAX_BYTES and len(_KEPT) > 1:
        _KEPT_BYTES[0] -= _KEPT.popitem(last=False)[1][2]
    return kept


def _price_kept(ctx, stage: StagePlan, pos, n, blocks: dict, spans: dict) -> _Kept:
    layer = blocks["layer"]
    if stage.cache_group_layers:  # cache-aware layer grouping (cost/cache.py)
        blocks["layer"] = layer = training_grouped_layer(ctx, stage, layer, n)
    fwd = n * st._scalar(layer.fwd_s) + sum(st._scalar(b.fwd_s) for k, b in blocks.items() if k != "layer")
    recompute = st._recompute_fwd_s(stage, layer, ctx.tables.layer, early_stop_applies(ctx))
    bwd = n * (st._scalar(layer.bwd_s) + recompute) + sum(st._scalar(b.bwd_s) for k, b in blocks.items() if k != "layer")
    params = n * st._scalar(layer.params_per_gpu) + sum(
        st._scalar(b.params_per_gpu) for k, b in blocks.items() if k != "layer")
    tp_comm, cp_comm = st._tp_comm_s(ctx, stage, spans["tp"], layer, n), st._cp_comm_s(ctx, stage, spans["cp"], layer, n)
    layer_bwd = st._scalar(layer.bwd_s) + recompute + (tp_comm + cp_comm) / np.maximum(n, 1)
    saved, working = sa.saved_and_working_bytes(ctx, stage, blocks, n)
    kept = _Kept(layer=layer, fwd_s=fwd, bwd_s=bwd, params=params, tp_comm_s=tp_comm, cp_comm_s=cp_comm,
                 p2p_s=st._p2p_s(ctx, stage, pos, fwd + bwd),
                 host_s=n * layers_host_s(ctx, stage, moe=False, gpu_fwd_s=st._scalar(layer.fwd_s), gpu_bwd_s=layer_bwd),
                 saved_bytes=saved, working_bytes=working)
    for value in vars(kept).values():
        if isinstance(value, np.ndarray) and value.flags.owndata:
            value.flags.writeable = False
    return kept


def _checked(ctx, stage: StagePlan) -> None:
    if ctx.tables.op_stream and ctx.tables.model.is_moe:
        require(stage.ep == 1 and stage.etp == 1 and stage.tp == 1, "ep",
                f"the {ctx.runtime.name} runtime's captured MoE layer (graph/opstream.py) holds every expert on "
                f"each GPU: ep, etp and tp must be 1, got {stage.ep}, {stage.etp} and {stage.tp}")


def _memory(ctx, stage: StagePlan, pos, k: _Kept) -> StageMemory:
    """The stage's HBM before any offload (cost/offload.py moves parts of it)."""
    weights, grads, optim = sharded_state_memory(k.params, ctx.workload.dtype, stage, st._gather_bytes(ctx),
                                                 *state_flags(ctx.runtime, ctx.workload.dtype))
    saved, temporary = k.saved_bytes, sa.zero3_buffers(stage, k.layer, ctx, k.working_bytes)
    grads = sa.gradients_at_peak(ctx, stage, grads, saved * pos.inflight)
    if ctx.tables.op_stream:  # the 16-bit weights are autocast's casts, counted with what each forward saves
        weights = 0.0 * weights
    return StageMemory(
        weights_bytes=weights, gradients_bytes=grads, optimizer_states_bytes=optim,
        activations_bytes=saved * pos.inflight, temporary_bytes=temporary,
        reserved_bytes=ctx.cluster.device.reserved_bytes, allocator_share=ctx.runtime.allocator_reserve_share,
    )


def _spans(ctx, stage: StagePlan, pos) -> dict:
    return group_spans(stage.mesh_order, stage.tp, stage.cp, stage.dp, ctx.cluster.gpus_per_node, pos.first_gpu)


def dense_stage_memory(ctx, stage: StagePlan, pos, num_layers=None) -> StageMemory | None:
    """dense_stage_cost's memory without its data-parallel and optimizer times (the search's memory
    screens read only this); None where an offload's time shapes the memory too, for the caller to
    price the whole stage."""
    if offloads(stage) or stage.activation_offload_layers:
        return None
    _checked(ctx, stage)
    n = stage.num_layers if num_layers is None else num_layers
    return _memory(ctx, stage, pos, _kept(ctx, stage, pos, n, _spans(ctx, stage, pos)))


def dense_stage_cost(ctx, stage: StagePlan, pos, num_layers=None) -> st.StageCost:
    """Time and memory of a dense ``stage`` at ``pos`` in a plan sharing ``ctx`` (the training
    entry, autotune.cost.contract.stage_cost, sends MoE stages and variants elsewhere).

    ``num_layers`` (a number or an array) overrides the stage's own layer count; with an array
    every field of the result is an array over it. A mixture of experts priced from a captured
    operator stream comes here too (graph/table.py: its whole layer is one table).
    """
    _checked(ctx, stage)
    spans = _spans(ctx, stage, pos)
    n = stage.num_layers if num_layers is None else num_layers
    k = _kept(ctx, stage, pos, n, spans)
    layer, fwd, bwd, params = k.layer, k.fwd_s, k.bwd_s, k.params
    # ZeRO-3's layer traffic, which its DP and per-micro-batch terms share (below ZeRO 3 they read only the groups)
    sharding = st._sharding(ctx, stage, spans["dp_cp"], layer) if spans["dp_cp"].size > 1 and stage.zero >= 3 else None
    time = st.StageTime(
        compute_s=fwd + bwd, tp_comm_s=k.tp_comm_s, cp_comm_s=k.cp_comm_s, p2p_s=k.p2p_s, host_s=k.host_s,
        zero3_comm_s=st._zero3_comm_s(ctx, stage, spans["dp_cp"], layer, n, sharding), offload_s=0.0 * n,
        dp_comm_s=st._dp_comm_s(ctx, stage, spans["dp_cp"], layer, n, params, fwd, bwd, sharding),
        optimizer_s=st._optimizer_s(ctx, stage, params, stage.shard_degree * stage.cp),
    )
    memory = _memory(ctx, stage, pos, k)
    if offloads(stage):  # tensor classes in host or CXL memory (cost/offload.py)
        time, memory = training_offload(ctx, stage, time, memory, saved_bytes=k.saved_bytes, fwd_s=fwd, bwd_s=bwd,
                                        params=params, num_layers=n)
    if stage.activation_offload_layers:  # Megatron-Core's cpu_offloading of the first N layers (cost/offload.py)
        time, memory = layer_offload(ctx, stage, time, memory, layer_saved_bytes=st._scalar(layer.saved_bytes), num_layers=n,
                                     fwd_layer_s=st._scalar(layer.fwd_s), bwd_layer_s=st._scalar(layer.bwd_s),
                                     inflight=pos.inflight)
    return st.StageCost(time=time, memory=memory, params_per_gpu=params, fwd_s=fwd, bwd_s=bwd)
