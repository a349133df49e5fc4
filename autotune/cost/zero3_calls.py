"""ZeRO-3 gathered tensor by tensor, as DeepSpeed's stage 3 of 2021 ran it (the settings and their
sources: the deepspeed-2021 runtime preset and calibrate/deepspeed_2021.py).

Each weight tensor of a layer has its own all-gather before its module runs and its own
reduce-scatter after its backward. The runtime synchronises the device when a module is fetched,
then starts the next tensor's gather (a prefetch) before queueing the module's compute, so a
gather hides behind the compute of the module before it, never of a whole layer; the host work
between the synchronisation and the launch leaves the device idle. Reduce-scatters are waited
for at the next fetch. Per call: the ring's latency (NCCL 2.8's model, cost/comm.py), with list
collectives a copy kernel per rank (PyTorch 1.8 ProcessGroupNCCL), and for gathers the runtime's
host time per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.cost.comm import GroupSpan, collective_time_s, nccl_2_8_ring_s
from autotune.cost.sharding import LayerTraffic, ShardGroups, layer_traffic, overlap_penalty_s, rate_share
from autotune.errors import require, require_choice
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a stage of training or of inference
    from autotune.cost.context import CostContext

__all__ = ["GatherCalls", "TensorTraffic", "gather_calls", "layer_weight_elements", "tensor_layer_traffic", "zero3_layer_traffic"]


@dataclass(frozen=True, kw_only=True)
class GatherCalls:
    """How a runtime issues a layer's ZeRO-3 collectives (Runtime's fields): ``shares``
    of the layer's weights, one call each in forward order; ``regathered``: the tensors gathered
    again for the backward after a full recomputation; ``copy_kernel_s``: one copy kernel."""

    shares: tuple[float, ...] = (1.0,)
    regathered: tuple[int, ...] = ()
    per_rank_copies: bool = False
    gather_host_s_per_rank: float = 0.0
    nccl_tuning: str = ""
    copy_kernel_s: float = 0.0

    def __post_init__(self) -> None:
        require(len(self.shares) > 0 and all(s > 0 for s in self.shares) and math.isclose(sum(self.shares), 1.0,
                rel_tol=1e-6), "gather_tensor_shares", f"must be positive shares summing to 1, got {self.shares}")
        require(all(0 <= i < len(self.shares) for i in self.regathered) and len(set(self.regathered))
                == len(self.regathered), "regathered_tensors", f"must be distinct indices of the tensors, got "
                f"{self.regathered} for {len(self.shares)}")
        require(self.copy_kernel_s >= 0 and self.gather_host_s_per_rank >= 0, "gather_host_s_per_rank",
                f"per-rank costs must be >= 0, got {self.copy_kernel_s}, {self.gather_host_s_per_rank}")
        require_choice("nccl_tuning", self.nccl_tuning, ("", "2.8"))

    def call_s(self, op: str, nbytes: float, span: GroupSpan, cluster: ClusterSpec) -> tuple[float, float, float]:
        """(device fixed s, exposed host s, transfer s) of one call on ``nbytes``."""
        if self.nccl_tuning == "2.8":
            latency, transfer = nccl_2_8_ring_s(op, nbytes, span, cluster)
        else:
            latency = collective_time_s(op, 1.0, span, cluster)
            transfer = collective_time_s(op, nbytes, span, cluster) - latency
        if span.size <= 1:
            return latency, 0.0, transfer
        copies = span.size * self.copy_kernel_s if self.per_rank_copies else 0.0
        host = span.size * self.gather_host_s_per_rank if op == "all_gather" else 0.0
        return latency + copies, host, transfer


def layer_weight_elements(model: ModelSpec, tp: int, qkv_fused: bool) -> list[int]:
    """Elements per GPU of one layer's weight matrices in forward order: Q/K/V (fused or three),
    the attention output, the FFN's (gate and up, or up) and its down projection."""
    h, q_dim, kv_dim, ffn = model.hidden_size, model.head_dim * model.num_heads, model.kv_dim, model.ffn_hidden_size
    attention = [h * (q_dim + 2 * kv_dim)] if qkv_fused else [h * q_dim, h * kv_dim, h * kv_dim]
    up = [h * ffn, h * ffn] if model.is_gated_ffn else [h * ffn]
    return [elements // tp for elements in (*attention, q_dim * h, *up, ffn * h)]


def gather_calls(runtime: Runtime, model: ModelSpec, tp: int, copy_kernel_s: float) -> GatherCalls | None:
    """How the runtime issues a layer's ZeRO-3 collectives, or None: one flat, coalesced call per
    layer. Per-tensor runtimes (Runtime.zero3_persistence_elements > 0) gather each weight tensor of
    at least that many elements in its own call; a tensor is gathered again for the backward after
    a full recomputation when twice its layer's later weights exceed the reuse distance."""
    fields = {"per_rank_copies": runtime.per_rank_copies, "gather_host_s_per_rank": runtime.gather_host_s_per_rank,
              "nccl_tuning": runtime.nccl_tuning}
    shares: tuple[float, ...] = ()
    regathered: tuple[int, ...] = ()
    if runtime.zero3_persistence_elements:
        gathered = [e for e in layer_weight_elements(model, tp, runtime.qkv_fused) if e >= runtime.zero3_persistence_elements]
        if not gathered:  # every tensor persists: nothing is gathered per layer
            return None
        shares = tuple(e / sum(gathered) for e in gathered)
        limit = runtime.zero3_max_reuse_elements
        regathered = tuple(i for i in range(len(gathered)) if limit and 2 * sum(gathered[i + 1:]) > limit)
    if not shares and not any(fields.values()):
        return None
    return GatherCalls(shares=shares or (1.0,), regathered=regathered, copy_kernel_s=copy_kernel_s, **fields)


def _prefetched_s(gathers, windows, share: float) -> float:
    """Exposed seconds of gathers each hidden behind one compute window (and the slowdown of the
    compute beside the hidden part, sharding.overlap_penalty_s)."""
    return sum(np.maximum(0.0, g - w) + overlap_penalty_s(g, w, share) for g, w in zip(gathers, windows))


@dataclass(frozen=True, kw_only=True)
class TensorTraffic:
    """One layer's per-tensor calls: device seconds of each gather and reduce-scatter (forward
    order), the host seconds of one gather, and the recomputed forward inside the backward window."""

    calls: GatherCalls
    gather_s: tuple  # seconds per tensor, each a float or an array (one per stage size the search scores)
    reduce_s: tuple
    host_s: float
    recompute_s: object  # seconds, or an array of them (one per micro-batch size the search scores)

    def exposed_s(self, overlap: bool, recompute_full: bool, t: LayerTraffic):
        """Exposed seconds per layer and micro-batch: the forward's gathers, the recomputation's
        (under full recompute), the backward's (all, or the re-gathered ones after a recompute)
        and the reduce-scatters."""
        g, k, shares = self.gather_s, len(self.gather_s), self.calls.shares
        back = self.calls.regathered if recompute_full else tuple(range(k))
        calls = k * (2 if recompute_full else 1) + len(back)
        fixed = calls * self.host_s + sum(self.reduce_s)
        if not overlap:
            return fixed + sum(g) * (2 if recompute_full else 1) + sum(g[i] for i in back) + 0.0 * t.fwd_s
        fwd = [t.fwd_s * s for s in shares]
        bwd = [(t.bwd_s - (self.recompute_s if recompute_full else 0.0)) * s for s in shares]
        exposed = _prefetched_s(g, [fwd[-1], *fwd[:-1]], t.share)  # the first behind the layer before's last
        if recompute_full:  # recomputed: the first behind the backward of the layer after's first module
            rec = [self.recompute_s * s for s in shares]
            exposed += _prefetched_s(g, [bwd[0], *rec[:-1]], t.share)
            after = rec[-1]
        else:
            after = bwd[0]
        windows = [bwd[i + 1] if i + 1 < k else after for i in back]  # backward runs last to first
        return fixed + exposed + _prefetched_s([g[i] for i in back], windows, t.share)


def tensor_layer_traffic(cluster: ClusterSpec, groups: ShardGroups, params: float, gather_bytes_per_param: float,
                         grad_bytes_per_param: float, fwd_s, bwd_s, recompute_s,
                         gather_rate_bytes_per_s: float, calls: GatherCalls) -> LayerTraffic:
    """A layer's traffic tensor by tensor; ``gather_rate_bytes_per_s`` > 0 bounds each gather's
    transfer (TrainingWorkload.param_gather_bytes_per_s); ``bwd_s`` includes ``recompute_s``."""
    shard = groups.shard
    gathers, reduces, host = [], [], 0.0
    for share in calls.shares:
        nbytes = params * share * gather_bytes_per_param
        fixed, host, transfer = calls.call_s("all_gather", nbytes, shard, cluster)
        if gather_rate_bytes_per_s > 0:
            transfer = np.maximum(transfer, nbytes * (1.0 - 1.0 / shard.size) / gather_rate_bytes_per_s)
        gathers.append(fixed + transfer)
        grad = params * share * grad_bytes_per_param
        rs_fixed, _, rs_transfer = calls.call_s("reduce_scatter", grad, shard, cluster)
        replicas = collective_time_s("all_reduce", grad / shard.size, groups.replicate, cluster)
        reduces.append(rs_fixed + rs_transfer + replicas)
    tensors = TensorTraffic(calls=calls, gather_s=tuple(gathers), reduce_s=tuple(reduces), host_s=host,
                            recompute_s=recompute_s)
    return LayerTraffic(gather_s=sum(gathers), reduce_s=sum(reduces), fwd_s=fwd_s, bwd_s=bwd_s,
                        share=rate_share(shard, cluster), tensors=tensors)


def zero3_layer_traffic(ctx: CostContext, tp: int, groups: ShardGroups, params: float, gather_bytes_per_param: float,
                        grad_bytes_per_param: float, fwd_s, bwd_s, recompute_s) -> LayerTraffic:
    """The layer's traffic as the context's runtime issues it: tensor by tensor, or one flat call
    (sharding.layer_traffic); a copy kernel is priced as the device's back-to-back memory kernel."""
    cluster = ctx.cluster
    rate = ctx.runtime.param_gather_bytes_per_s
    calls = gather_calls(ctx.runtime, ctx.tables.model, tp, cluster.device.memory.latency_s)
    if calls is None:
        return layer_traffic(cluster, groups, params, gather_bytes_per_param, grad_bytes_per_param, fwd_s, bwd_s, rate)
    return tensor_layer_traffic(cluster, groups, params, gather_bytes_per_param, grad_bytes_per_param, fwd_s,
                                bwd_s, recompute_s, rate, calls)
