"""Time and memory of a pipeline stage of a mixture-of-experts model (training).

The stage's dense layers are priced as in cost/stage.py; its MoE layers are the non-expert part
(attention, router, permutation, shared experts: the ``moe_layer`` table, parallel like a dense
layer) plus the routed experts under expert parallelism (cost/moe.py). Non-expert parameters
are synchronised and sharded over dp x cp, expert parameters over the expert data-parallel
group edp (Megatron-Core's distributed optimizer keeps a separate expert-DP buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np

from autotune.cost import stage as st
from autotune.cost import stage_activations as sa
from autotune.cost.comm import collective_time_s
from autotune.cost.host import exposed_host_s, layer_issue
from autotune.cost.memory import StageMemory
from autotune.cost.sharding import grad_comm_bytes, sharded_state_memory, state_flags
from autotune.cost.mesh import group_spans
from autotune.cost.offload import layer_offload, offloads
from autotune.cost.recompute_modules import early_stop_applies, expert_modules, modules_dropped_bytes
from autotune.cost.moe import ExpertLayerCost, expert_layer_cost, expert_spans, moe_layer_split
from autotune.errors import require
from autotune.plan.plan import StagePlan

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a stage of training or of inference
    from autotune.cost.context import CostContext

__all__ = ["moe_stage_cost", "moe_stage_memory"]


def _tp_layer_share(ctx: CostContext) -> float:
    """TP collectives of an MoE layer relative to a dense layer's two pairs: attention's pair,
    plus the shared experts' pair; the routed experts exchange tokens by all-to-all instead
    (Megatron-Core's alltoall dispatcher on sequence-parallel tokens)."""
    return (1.0 + (1.0 if ctx.tables.model.num_shared_experts else 0.0)) / 2.0


def _expert_zero3_s(ctx: CostContext, stage: StagePlan, span, ex: ExpertLayerCost, fwd_layer, bwd_layer, n_moe):
    """ZeRO-3 over edp for the expert weights: gather before forward and backward, scatter the
    gradients, prefetched one layer ahead (as _zero3_comm_s)."""
    if stage.zero < 3 or span.size <= 1:
        return 0.0 * n_moe
    gather = collective_time_s("all_gather", ex.params_per_gpu * st._gather_bytes(ctx), span, ctx.cluster)
    scatter = collective_time_s("reduce_scatter", ex.params_per_gpu * grad_comm_bytes(ctx.runtime, ctx.workload.dtype),
                                span, ctx.cluster)
    per_layer = np.maximum(0.0, gather - fwd_layer) + np.maximum(0.0, gather + scatter - bwd_layer)
    return n_moe * per_layer


# Share of the SMs the expert-parallel exchange kernels occupy while they run beside compute:
# 20 of the H800's 132 SMs (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.2.2).
EP_COMM_SM_SHARE = 20.0 / 132.0


def _exposed_ep_comm_s(ctx, stage: StagePlan, moe, ex: ExpertLayerCost):
    """One MoE layer's exposed all-to-all and expert-TP collectives per micro-batch. Under
    Megatron-Core's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm; the merged
    forward-backward of DeepSeek-V3's DualPipe, arXiv 2412.19437 sec. 3.2.1) one micro-batch's
    exchanges run while another's layer computes, so only what exceeds the layer's forward plus
    backward compute stays exposed (the steady state; warm-up and cool-down are not modelled),
    and the overlapped compute runs on the SMs the exchange leaves (EP_COMM_SM_SHARE)."""
    comm = ex.comm_s + (ex.recompute_comm_s if stage.recompute == "full" else expert_modules(stage, ex)[2])
    if not ctx.runtime.overlap_ep_comm:
        return comm
    compute = st._scalar(moe.fwd_s) + st._scalar(moe.bwd_s) + ex.fwd_s + ex.bwd_s
    slowed = np.minimum(comm, compute) * EP_COMM_SM_SHARE / (1.0 - EP_COMM_SM_SHARE)
    return np.maximum(0.0, comm - compute) + slowed


def _expert_block(ex: ExpertLayerCost):
    """The routed experts of one layer in the shape cost/sharding.py's traffic reads."""
    return SimpleNamespace(params_per_gpu=ex.params_per_gpu, fwd_s=ex.fwd_s, bwd_s=ex.bwd_s, selective_fwd_s=0.0)


# _expert_stage by the stage's fields but its place (layers, embedding, head, offloaded layers), each with its type
# (1 and True differ): a search asks for the same choice's expert stage at every position and
# degree, and a StagePlan validates itself (DeepSeek-V3 on 2048 GPUs: 2,095 asks, 1,017 of them
# distinct stages, 337 distinct expert stages)
_EXPERT_STAGES: dict = {}
_EXPERT_STAGES_KEPT = 4096
_PLACE_FIELDS = ("layers", "has_embedding", "has_head", "activation_offload_layers")


def _expert_stage(stage: StagePlan) -> StagePlan:
    """The stage as its expert weights see it: sharded over edp (no HSDP split, no cp). Its place
    is a one-layer middle stage, no activation offload, whatever the stage's are: its readers
    (sharded_state_memory and the expert gradients' _dp_comm_s) are given the layer counts and
    read neither."""
    named = dict(vars(stage))
    for name in _PLACE_FIELDS:
        del named[name]
    values = tuple(named.values())
    key = (values, tuple(map(type, values)))  # the fields in their declared order, then their types
    try:
        found = _EXPERT_STAGES.get(key)
    except TypeError:  # an unhashable field (a list of recompute modules): made each time
        return _expert_stage_of(stage)
    if found is None:
        if len(_EXPERT_STAGES) >= _EXPERT_STAGES_KEPT:
            _EXPERT_STAGES.pop(next(iter(_EXPERT_STAGES)))  # the oldest
        found = _EXPERT_STAGES[key] = _expert_stage_of(stage)
    return found


def _expert_stage_of(stage: StagePlan) -> StagePlan:
    return replace(stage, dp=stage.edp, tp=stage.ep * stage.etp, cp=1, dp_shard=0, layers=(0, 1),
                   has_embedding=False, has_head=False, activation_offload_layers=0)


def _saved_moe_layer(ctx, stage: StagePlan, moe, ex: ExpertLayerCost):
    """Activation bytes one MoE layer keeps per micro-batch under the stage's recomputation."""
    m = ctx.tables.model
    layer_input = (ctx.micro_batch * ctx.tables.seq_len / stage.cp * m.hidden_size * ctx.tables.act_bytes
                   / (stage.tp if stage.sequence_parallel else 1))
    full = st._scalar(moe.saved_bytes) + ex.saved_bytes
    if stage.recompute == "full":  # only the layer input (Korthikanti sec. 4.3)
        return layer_input
    if stage.recompute == "selective_op":  # about half, as cost/stage.py's _activation_bytes
        return 0.5 * (full + layer_input)
    modules = st._scalar(modules_dropped_bytes(ctx, stage, ctx.tables.moe_layer)) + expert_modules(stage, ex)[1]
    return full - modules - (st._scalar(moe.selective_saved_bytes) if stage.recompute == "selective" else 0.0)


def _expert_recompute_s(stage: StagePlan, ex: ExpertLayerCost):
    """Expert forward seconds run again in backward: full, all of it; torchtitan's op-level policy,
    every other matmul (cost/stage.py); named modules, cost/recompute_modules.py."""
    share = {"full": 1.0, "selective_op": 0.5}.get(stage.recompute, 0.0)
    return share * ex.fwd_s if share else expert_modules(stage, ex)[0]


# expert_layer_cost by what it reads: the context's parts (by identity: each entry holds the
# context, so no other object takes their ids while it lives), micro-batch sizes and counts, the
# stage's tp, cp, ep, etp and GPUs, and its first GPU's offset in its node. A search prices one
# choice at three positions and every member of a class (recomputation, ZeRO) with the same
# expert layer; a plan's stages of the same shape share it too.
_EXPERT_COSTS: dict = {}
_EXPERT_COSTS_KEPT = 256  # entries (each a few small arrays): memory stays bounded


def _expert_cost(ctx, stage: StagePlan, first_gpu: int) -> ExpertLayerCost:
    b, n = np.asarray(ctx.micro_batch), np.asarray(ctx.num_microbatches)
    key = (id(ctx.tables), id(ctx.cluster), id(ctx.workload), id(ctx.runtime), b.shape, tuple(b.ravel().tolist()),
           n.shape, tuple(n.ravel().tolist()), stage.tp, stage.cp, stage.ep, stage.etp, stage.num_gpus,
           first_gpu % ctx.cluster.gpus_per_node)  # the spans see the first GPU's place in its node only
    found = _EXPERT_COSTS.get(key)
    if found is None:
        if len(_EXPERT_COSTS) >= _EXPERT_COSTS_KEPT:
            _EXPERT_COSTS.pop(next(iter(_EXPERT_COSTS)))  # the oldest
        found = _EXPERT_COSTS[key] = (ctx, expert_layer_cost(ctx, stage, first_gpu))
    return found[1]


@dataclass(frozen=True, kw_only=True, eq=False)
class _Layers:
    """What a stage's layers give wherever it sits (first, middle or last: its embedding, head,
    neighbours and micro-batches in flight aside), which its memory and its time both read."""

    dense: object  # the dense layer's BlockTimes
    moe: object  # the MoE layer's non-expert BlockTimes
    n_dense: object
    n_moe: object
    ex: ExpertLayerCost
    params: object  # non-expert parameters per GPU of the layers
    expert_stage: StagePlan
    expert_state_bytes: tuple  # (weights, gradients, optimizer states) of the expert parameters
    moe_saved_bytes: object  # the MoE layers' activations per micro-batch in flight
    moe_temp_bytes: object  # one MoE layer's working bytes


@dataclass(frozen=True, kw_only=True, eq=False)
class _LayerTimes:
    """The layers' time terms wherever the stage sits (moe_stage_cost adds the place's)."""

    spans: dict
    ex_spans: dict
    fwd_s: object  # the layers' kernels, forward
    bwd_s: object  # and backward with recomputation
    tp_comm_s: object  # the layers' TP collectives (stage.py _tp_place_comm_s adds the embedding's and head's)
    tp_one_s: object  # one TP collective's seconds (None without TP)
    cp_comm_s: object
    zero3_s: object
    ep_comm_s: object
    expert_params: object
    expert_optimizer_s: object
    dense_sharding: object  # stage.py _sharding of the dense layer under ZeRO-3 (else None), for _dp_comm_s
    expert_sharding: object  # and of the experts over edp
    dense_gpu_bwd_s: object  # _host_s' GPU windows less the per-layer TP and CP collectives
    moe_gpu_fwd_s: object
    moe_gpu_bwd_s: object
    dense_issue: tuple  # cost/host.py layer_issue of a dense and of an MoE layer
    moe_issue: tuple


# _Layers and _LayerTimes by the context (by identity: each entry holds it, so no other object
# takes its id while it lives), its micro-batch sizes and counts, the stage's fields but its
# embedding and head (each with its type: 1 and True differ), the first GPU and the layer counts.
# A search prices each choice first, middle and last (DeepSeek-V3 on 2048 GPUs: 1,331 stage costs
# of 699 such stages).
_LAYERS: dict = {}
_LAYER_TIMES: dict = {}
_LAYERS_KEPT = 2048  # entries of a few arrays over the layer counts: memory stays bounded


def _layers_key(ctx, stage: StagePlan, pos, num_layers) -> tuple:
    """The key of the stage's _Layers and _LayerTimes (unhashable where a field is: a list of recompute modules)."""
    named = dict(vars(stage))
    del named["has_embedding"], named["has_head"]
    values = tuple(named.values())
    b, n = np.asarray(ctx.micro_batch), np.asarray(ctx.num_microbatches)
    layers = ((num_layers.shape, num_layers.dtype.str, num_layers.tobytes()) if isinstance(num_layers, np.ndarray)
              else (type(num_layers), num_layers))
    return (id(ctx), b.shape, tuple(b.ravel().tolist()), n.shape, tuple(n.ravel().tolist()), values,
            tuple(map(type, values)), pos.first_gpu, layers)


def _kept(cache: dict, key: tuple, ctx, make):
    """``make()``, kept in ``cache`` under ``key`` (made each time where the key is unhashable)."""
    try:
        found = cache.get(key)
    except TypeError:
        return make()
    if found is None:
        if len(cache) >= _LAYERS_KEPT:
            cache.pop(next(iter(cache)))  # the oldest
        found = cache[key] = (ctx, make())
    return found[1]


def _layers_of(ctx, stage: StagePlan, pos, num_layers) -> _Layers:
    m = ctx.tables.model
    require(m.num_experts % stage.ep == 0, "ep", f"ep={stage.ep} must divide the {m.num_experts} experts")
    require(m.expert_ffn_hidden_size % stage.etp == 0, "etp",
            f"etp={stage.etp} must divide the expert width {m.expert_ffn_hidden_size}")
    require(not offloads(stage) and not stage.cache_group_layers, "stage",
            "offload and cache grouping are not modelled for mixture-of-experts stages")
    dense = st._block(ctx, ctx.tables.layer, stage)
    moe = st._block(ctx, ctx.tables.moe_layer, stage)
    n_dense, n_moe = moe_layer_split(ctx.tables, stage, num_layers)
    ex = _expert_cost(ctx, stage, pos.first_gpu)
    expert_stage = _expert_stage(stage)
    moe_temp = st._scalar(moe.saved_bytes) + ex.saved_bytes + ex.buffer_bytes
    if stage.zero >= 3:
        moe_temp = moe_temp + 2 * (st._scalar(moe.params_per_gpu) + ex.params_per_gpu) * ctx.tables.act_bytes
    return _Layers(
        dense=dense, moe=moe, n_dense=n_dense, n_moe=n_moe, ex=ex, expert_stage=expert_stage,
        params=n_dense * st._scalar(dense.params_per_gpu) + n_moe * st._scalar(moe.params_per_gpu),
        expert_state_bytes=sharded_state_memory(n_moe * ex.params_per_gpu, ctx.workload.dtype, expert_stage,
                                                st._gather_bytes(ctx), *state_flags(ctx.runtime, ctx.workload.dtype)),
        moe_saved_bytes=n_moe * _saved_moe_layer(ctx, stage, moe, ex), moe_temp_bytes=moe_temp)


def _layers(ctx, stage: StagePlan, pos, num_layers, key) -> _Layers:
    return _kept(_LAYERS, key, ctx, lambda: _layers_of(ctx, stage, pos, num_layers))


def _kernel_times(ctx, stage: StagePlan, lay: _Layers) -> tuple:
    """(forward, backward incl. recomputation) kernel seconds of the layers per micro-batch."""
    dense, moe, ex = lay.dense, lay.moe, lay.ex
    early_stop = early_stop_applies(ctx)
    fwd = lay.n_dense * st._scalar(dense.fwd_s) + lay.n_moe * (st._scalar(moe.fwd_s) + ex.fwd_s)
    bwd = (lay.n_dense * (st._scalar(dense.bwd_s) + st._recompute_fwd_s(stage, dense, ctx.tables.layer, early_stop))
           + lay.n_moe * (st._scalar(moe.bwd_s) + st._recompute_fwd_s(stage, moe, ctx.tables.moe_layer, early_stop)
                          + ex.bwd_s + _expert_recompute_s(stage, ex)))
    return fwd, bwd


def _layer_times_of(ctx, stage: StagePlan, pos, lay: _Layers) -> _LayerTimes:
    dense, moe, ex, n_dense, n_moe = lay.dense, lay.moe, lay.ex, lay.n_dense, lay.n_moe
    spans = group_spans(stage.mesh_order, stage.tp, stage.cp, stage.dp, ctx.cluster.gpus_per_node, pos.first_gpu)
    ex_spans = expert_spans(stage, ctx.cluster.gpus_per_node, pos.first_gpu)
    zero3 = stage.zero >= 3
    sharding = st._sharding(ctx, stage, spans["dp_cp"], dense) if zero3 and spans["dp_cp"].size > 1 else None
    expert_sharding = (st._sharding(ctx, lay.expert_stage, ex_spans["edp"], _expert_block(ex))
                       if lay.expert_stage.zero >= 3 and ex_spans["edp"].size > 1 else None)
    fwd, bwd = _kernel_times(ctx, stage, lay)
    tp_comm, one = st._tp_layers_comm_s(ctx, stage, spans["tp"], dense, n_dense + n_moe * _tp_layer_share(ctx))
    early_stop = early_stop_applies(ctx)
    expert_params = n_moe * ex.params_per_gpu
    return _LayerTimes(
        spans=spans, ex_spans=ex_spans, fwd_s=fwd, bwd_s=bwd, tp_comm_s=tp_comm, tp_one_s=one,
        cp_comm_s=st._cp_comm_s(ctx, stage, spans["cp"], dense, n_dense + n_moe),
        zero3_s=(st._zero3_comm_s(ctx, stage, spans["dp_cp"], dense, n_dense, sharding)
                 + st._zero3_comm_s(ctx, stage, spans["dp_cp"], moe, n_moe)
                 + _expert_zero3_s(ctx, stage, ex_spans["edp"], ex, ex.fwd_s, ex.bwd_s, n_moe)),
        ep_comm_s=n_moe * _exposed_ep_comm_s(ctx, stage, moe, ex), expert_params=expert_params,
        expert_optimizer_s=st._optimizer_s(ctx, stage, expert_params, stage.edp),
        dense_sharding=sharding, expert_sharding=expert_sharding,
        dense_gpu_bwd_s=st._scalar(dense.bwd_s) + st._recompute_fwd_s(stage, dense, ctx.tables.layer, early_stop),
        moe_gpu_fwd_s=st._scalar(moe.fwd_s) + ex.fwd_s + ex.recompute_comm_s,
        moe_gpu_bwd_s=(st._scalar(moe.bwd_s) + st._recompute_fwd_s(stage, moe, ctx.tables.moe_layer, early_stop)
                       + ex.bwd_s + _expert_recompute_s(stage, ex) + (ex.comm_s - ex.recompute_comm_s)),
        dense_issue=layer_issue(ctx, stage, moe=False), moe_issue=layer_issue(ctx, stage, moe=True))


def _memory(ctx, stage: StagePlan, blocks: dict, lay: _Layers, params, pos) -> StageMemory:
    weights, grads, optim = sharded_state_memory(params, ctx.workload.dtype, stage, st._gather_bytes(ctx),
                                                 *state_flags(ctx.runtime, ctx.workload.dtype))
    e_weights, e_grads, e_optim = lay.expert_state_bytes
    saved, temporary = sa.activation_bytes(ctx, stage, blocks, lay.n_dense)
    saved = saved + lay.moe_saved_bytes
    return StageMemory(
        weights_bytes=weights + e_weights, gradients_bytes=grads + e_grads,
        optimizer_states_bytes=optim + e_optim, activations_bytes=saved * pos.inflight,
        temporary_bytes=np.maximum(temporary, lay.moe_temp_bytes), reserved_bytes=ctx.cluster.device.reserved_bytes,
        allocator_share=ctx.runtime.allocator_reserve_share)


def _host_s(lay: _Layers, t: _LayerTimes, per_layer_comm):
    """Exposed host dispatch per micro-batch (cost/host.py layers_host_s): the dense layers against
    their kernels and exposed collectives, the MoE layers against theirs, the forward's exchanges included."""
    (dense_fwd, dense_bwd, op_s, dense_synced), (moe_fwd, moe_bwd, _, moe_synced) = t.dense_issue, t.moe_issue
    return (lay.n_dense * exposed_host_s(dense_fwd, dense_bwd, st._scalar(lay.dense.fwd_s),
                                         t.dense_gpu_bwd_s + per_layer_comm, op_s, dense_synced)
            + lay.n_moe * exposed_host_s(moe_fwd, moe_bwd, t.moe_gpu_fwd_s, t.moe_gpu_bwd_s + per_layer_comm, op_s,
                                         moe_synced))


def _stage_parts(ctx, stage: StagePlan, pos, num_layers) -> tuple:
    """The stage's blocks, its layers' place-free parts (kept) and its non-expert parameters per GPU."""
    key = _layers_key(ctx, stage, pos, num_layers)
    lay = _layers(ctx, stage, pos, num_layers, key)
    blocks = st._blocks(ctx, stage)
    params = lay.params + sum(st._scalar(b.params_per_gpu) for k, b in blocks.items() if k != "layer")
    return key, blocks, lay, params


def moe_stage_memory(ctx, stage: StagePlan, pos, num_layers=None) -> StageMemory:
    """moe_stage_cost's memory without its time (the search's memory screens read only this):
    the same parts and the same _memory, so the same bytes; None where the time shapes the memory
    too (activation offload, cost/offload.py), for the caller to price the whole stage."""
    if stage.activation_offload_layers:
        return None
    _, blocks, lay, params = _stage_parts(ctx, stage, pos, num_layers)
    return _memory(ctx, stage, blocks, lay, params, pos)


def moe_stage_cost(ctx, stage: StagePlan, pos, num_layers=None):
    """cost/stage.py's StageCost for a stage of an MoE model: its layers' place-free terms (kept)
    and its embedding's, head's, neighbours' and in-flight micro-batches' per call."""
    key, blocks, lay, params = _stage_parts(ctx, stage, pos, num_layers)
    t = _kept(_LAYER_TIMES, key, ctx, lambda: _layer_times_of(ctx, stage, pos, lay))
    fwd = t.fwd_s + sum(st._scalar(b.fwd_s) for k, b in blocks.items() if k != "layer")
    bwd = t.bwd_s + sum(st._scalar(b.bwd_s) for k, b in blocks.items() if k != "layer")
    tp_comm = st._tp_place_comm_s(ctx, stage, t.spans["tp"], t.tp_comm_s, t.tp_one_s)
    per_layer_comm = (tp_comm + t.cp_comm_s) / np.maximum(lay.n_dense + lay.n_moe, 1)
    time = st.StageTime(
        compute_s=fwd + bwd, tp_comm_s=tp_comm, cp_comm_s=t.cp_comm_s, host_s=_host_s(lay, t, per_layer_comm),
        p2p_s=st._p2p_s(ctx, stage, pos, fwd + bwd), zero3_comm_s=t.zero3_s, offload_s=0.0 * fwd,
        dp_comm_s=(st._dp_comm_s(ctx, stage, t.spans["dp_cp"], lay.dense, lay.n_dense + lay.n_moe, params, fwd, bwd,
                                 t.dense_sharding)
                   + st._dp_comm_s(ctx, lay.expert_stage, t.ex_spans["edp"], _expert_block(lay.ex), lay.n_moe,
                                   t.expert_params, fwd, bwd, t.expert_sharding)),
        optimizer_s=st._optimizer_s(ctx, stage, params, stage.shard_degree * stage.cp) + t.expert_optimizer_s,
        ep_comm_s=t.ep_comm_s,
    )
    memory = _memory(ctx, stage, blocks, lay, params, pos)
    if stage.activation_offload_layers:  # Megatron-Core's cpu_offloading (cost/offload.py), per layer on average
        time, memory = _offloaded(ctx, stage, pos, lay, time, memory)
    return st.StageCost(time=time, memory=memory, params_per_gpu=params + t.expert_params, fwd_s=fwd, bwd_s=bwd)


def _offloaded(ctx, stage: StagePlan, pos, lay: _Layers, time, memory) -> tuple:
    dense, moe, ex, n_dense, n_moe = lay.dense, lay.moe, lay.ex, lay.n_dense, lay.n_moe
    n = np.maximum(n_dense + n_moe, 1)
    saved = n_dense * st._scalar(dense.saved_bytes) + lay.moe_saved_bytes
    fwd_layers = n_dense * st._scalar(dense.fwd_s) + n_moe * (st._scalar(moe.fwd_s) + ex.fwd_s)
    bwd_layers = n_dense * st._scalar(dense.bwd_s) + n_moe * (st._scalar(moe.bwd_s) + ex.bwd_s)
    return layer_offload(ctx, stage, time, memory, layer_saved_bytes=saved / n, num_layers=n_dense + n_moe,
                         fwd_layer_s=fwd_layers / n, bwd_layer_s=bwd_layers / n, inflight=pos.inflight)
