"""Time and memory of a pipeline stage of a mixture-of-experts model (training).

The stage's dense layers are priced as in cost/stage.py; its MoE layers are the non-expert part
(attention, router, permutation, shared experts: the ``moe_layer`` table, parallel like a dense
layer) plus the routed experts under expert parallelism (cost/moe.py). Non-expert parameters
are synchronised and sharded over dp x cp, expert parameters over the expert data-parallel
group edp (Megatron-Core's distributed optimizer keeps a separate expert-DP buffer).
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from autotune.cost import stage as st
from autotune.cost.comm import collective_time_s
from autotune.cost.host import layers_host_s
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


def _kernel_times(ctx, stage: StagePlan, blocks: dict, moe, ex: ExpertLayerCost, n_dense, n_moe):
    """(forward, backward incl. recomputation) kernel seconds of one micro-batch."""
    dense = blocks["layer"]
    others_fwd = sum(st._scalar(b.fwd_s) for k, b in blocks.items() if k != "layer")
    others_bwd = sum(st._scalar(b.bwd_s) for k, b in blocks.items() if k != "layer")
    expert_recompute = _expert_recompute_s(stage, ex)
    fwd = n_dense * st._scalar(dense.fwd_s) + n_moe * (st._scalar(moe.fwd_s) + ex.fwd_s) + others_fwd
    bwd = (n_dense * (st._scalar(dense.bwd_s) + st._recompute_fwd_s(stage, dense, ctx.tables.layer, early_stop_applies(ctx)))
           + n_moe * (st._scalar(moe.bwd_s) + st._recompute_fwd_s(stage, moe, ctx.tables.moe_layer, early_stop_applies(ctx))
                      + ex.bwd_s + expert_recompute)
           + others_bwd)
    return fwd, bwd


def _memory(ctx, stage: StagePlan, blocks: dict, moe, ex: ExpertLayerCost, n_dense, n_moe, params, pos,
            expert_stage: StagePlan):
    gather = st._gather_bytes(ctx)
    flags = state_flags(ctx.runtime, ctx.workload.dtype)
    weights, grads, optim = sharded_state_memory(params, ctx.workload.dtype, stage, gather, *flags)
    e_weights, e_grads, e_optim = sharded_state_memory(n_moe * ex.params_per_gpu, ctx.workload.dtype,
                                                       expert_stage, gather, *flags)
    saved, temporary = st._activation_bytes(ctx, stage, blocks, n_dense)
    saved = saved + n_moe * _saved_moe_layer(ctx, stage, moe, ex)
    moe_temp = st._scalar(moe.saved_bytes) + ex.saved_bytes + ex.buffer_bytes
    if stage.zero >= 3:
        moe_temp = moe_temp + 2 * (st._scalar(moe.params_per_gpu) + ex.params_per_gpu) * ctx.tables.act_bytes
    return StageMemory(
        weights_bytes=weights + e_weights, gradients_bytes=grads + e_grads,
        optimizer_states_bytes=optim + e_optim, activations_bytes=saved * pos.inflight,
        temporary_bytes=np.maximum(temporary, moe_temp), reserved_bytes=ctx.cluster.device.reserved_bytes,
        allocator_share=ctx.runtime.allocator_reserve_share)


def _host_s(ctx, stage: StagePlan, dense, moe, ex: ExpertLayerCost, per_layer_comm, n_dense, n_moe):
    """Exposed host dispatch per micro-batch (cost/host.py): the dense layers against their kernels
    and exposed collectives, the MoE layers against theirs, the forward's exchanges included."""
    expert_recompute = _expert_recompute_s(stage, ex)
    dense_gpu_bwd = st._scalar(dense.bwd_s) + st._recompute_fwd_s(stage, dense, ctx.tables.layer, early_stop_applies(ctx))
    moe_fwd = st._scalar(moe.fwd_s) + ex.fwd_s + ex.recompute_comm_s
    moe_bwd = (st._scalar(moe.bwd_s) + st._recompute_fwd_s(stage, moe, ctx.tables.moe_layer, early_stop_applies(ctx)) + ex.bwd_s
               + expert_recompute + (ex.comm_s - ex.recompute_comm_s) + per_layer_comm)
    return (n_dense * layers_host_s(ctx, stage, moe=False, gpu_fwd_s=st._scalar(dense.fwd_s),
                                    gpu_bwd_s=dense_gpu_bwd + per_layer_comm)
            + n_moe * layers_host_s(ctx, stage, moe=True, gpu_fwd_s=moe_fwd, gpu_bwd_s=moe_bwd))


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


def _stage_parts(ctx, stage: StagePlan, pos, num_layers):
    """What the stage's time and its memory both read: its blocks, its MoE layer's non-expert block,
    its dense and MoE layer counts, its experts' cost and its non-expert parameters per GPU."""
    m = ctx.tables.model
    require(m.num_experts % stage.ep == 0, "ep", f"ep={stage.ep} must divide the {m.num_experts} experts")
    require(m.expert_ffn_hidden_size % stage.etp == 0, "etp",
            f"etp={stage.etp} must divide the expert width {m.expert_ffn_hidden_size}")
    require(not offloads(stage) and not stage.cache_group_layers, "stage",
            "offload and cache grouping are not modelled for mixture-of-experts stages")
    blocks = st._blocks(ctx, stage)
    moe = st._block(ctx, ctx.tables.moe_layer, stage)
    n_dense, n_moe = moe_layer_split(ctx.tables, stage, num_layers)
    ex = _expert_cost(ctx, stage, pos.first_gpu)
    params = n_dense * st._scalar(blocks["layer"].params_per_gpu) + n_moe * st._scalar(moe.params_per_gpu) + sum(
        st._scalar(b.params_per_gpu) for k, b in blocks.items() if k != "layer")
    return blocks, moe, n_dense, n_moe, ex, params


def moe_stage_memory(ctx, stage: StagePlan, pos, num_layers=None) -> StageMemory:
    """moe_stage_cost's memory without its time (the search's memory screens read only this):
    the same parts and the same _memory, so the same bytes; None where the time shapes the memory
    too (activation offload, cost/offload.py), for the caller to price the whole stage."""
    if stage.activation_offload_layers:
        return None
    blocks, moe, n_dense, n_moe, ex, params = _stage_parts(ctx, stage, pos, num_layers)
    return _memory(ctx, stage, blocks, moe, ex, n_dense, n_moe, params, pos, _expert_stage(stage))


def moe_stage_cost(ctx, stage: StagePlan, pos, num_layers=None):
    """cost/stage.py's StageCost for a stage of an MoE model."""
    blocks, moe, n_dense, n_moe, ex, params = _stage_parts(ctx, stage, pos, num_layers)
    dense = blocks["layer"]
    spans = group_spans(stage.mesh_order, stage.tp, stage.cp, stage.dp, ctx.cluster.gpus_per_node, pos.first_gpu)
    ex_spans = expert_spans(stage, ctx.cluster.gpus_per_node, pos.first_gpu)
    fwd, bwd = _kernel_times(ctx, stage, blocks, moe, ex, n_dense, n_moe)
    expert_params = n_moe * ex.params_per_gpu
    ep_comm = n_moe * _exposed_ep_comm_s(ctx, stage, moe, ex)
    expert_stage = _expert_stage(stage)
    zero3 = (st._zero3_comm_s(ctx, stage, spans["dp_cp"], dense, n_dense)
             + st._zero3_comm_s(ctx, stage, spans["dp_cp"], moe, n_moe)
             + _expert_zero3_s(ctx, stage, ex_spans["edp"], ex, ex.fwd_s, ex.bwd_s, n_moe))
    tp_comm = st._tp_comm_s(ctx, stage, spans["tp"], dense, n_dense + n_moe * _tp_layer_share(ctx))
    cp_comm = st._cp_comm_s(ctx, stage, spans["cp"], dense, n_dense + n_moe)
    per_layer_comm = (tp_comm + cp_comm) / np.maximum(n_dense + n_moe, 1)
    time = st.StageTime(
        compute_s=fwd + bwd, tp_comm_s=tp_comm, cp_comm_s=cp_comm,
        host_s=_host_s(ctx, stage, dense, moe, ex, per_layer_comm, n_dense, n_moe),
        p2p_s=st._p2p_s(ctx, stage, pos, fwd + bwd), zero3_comm_s=zero3, offload_s=0.0 * fwd,
        dp_comm_s=(st._dp_comm_s(ctx, stage, spans["dp_cp"], dense, n_dense + n_moe, params, fwd, bwd)
                   + st._dp_comm_s(ctx, expert_stage, ex_spans["edp"], _expert_block(ex), n_moe,
                                   expert_params, fwd, bwd)),
        optimizer_s=(st._optimizer_s(ctx, stage, params, stage.shard_degree * stage.cp)
                     + st._optimizer_s(ctx, stage, expert_params, stage.edp)),
        ep_comm_s=ep_comm,
    )
    memory = _memory(ctx, stage, blocks, moe, ex, n_dense, n_moe, params, pos, expert_stage)
    if stage.activation_offload_layers:  # Megatron-Core's cpu_offloading (cost/offload.py), per layer on average
        n = np.maximum(n_dense + n_moe, 1)
        saved = n_dense * st._scalar(dense.saved_bytes) + n_moe * _saved_moe_layer(ctx, stage, moe, ex)
        fwd_layers = n_dense * st._scalar(dense.fwd_s) + n_moe * (st._scalar(moe.fwd_s) + ex.fwd_s)
        bwd_layers = n_dense * st._scalar(dense.bwd_s) + n_moe * (st._scalar(moe.bwd_s) + ex.bwd_s)
        time, memory = layer_offload(ctx, stage, time, memory, layer_saved_bytes=saved / n, num_layers=n_dense + n_moe,
                                     fwd_layer_s=fwd_layers / n, bwd_layer_s=bwd_layers / n, inflight=pos.inflight)
    return st.StageCost(time=time, memory=memory, params_per_gpu=params + expert_params, fwd_s=fwd, bwd_s=bwd)
