"""Data-parallel sharding as the runtimes run it: ZeRO 0-3, FSDP and hybrid sharding (HSDP).

Which collective runs how often, over which group, and how much of it compute hides:

* zero 0 (DDP): one gradient all-reduce per step, bucketed and overlapped with the last
  micro-batch's backward (PyTorch DDP; Li et al. VLDB'20).
* zero 1 (Megatron-Core distributed optimizer): gradients reduce-scattered once per step,
  updated 16-bit weights all-gathered once per step (overlapped with the next forward when
  ``overlap_param_gather``).
* zero 2 (DeepSpeed): gradients reduce-scattered every micro-batch (the full gradient is not
  kept), weights all-gathered once per step (Rajbhandari et al. SC'20, sec. 5.2).
* zero 3 with ``reshard_after_forward`` (DeepSpeed ZeRO-3, FSDP1 FULL_SHARD, FSDP2's
  default): every micro-batch gathers each layer's weights before its forward and again
  before its backward (recomputation included: the gather serves both), and reduce-scatters
  its gradients after its backward; the next layer's gather is prefetched behind the current
  layer's compute (Zhao et al. VLDB'23, PyTorch FSDP, sec. 3.3-3.4), so per layer only what
  the layer's compute cannot cover is exposed, plus the first gather.
* zero 3 without resharding (FSDP2 ``reshard_after_forward=False`` as torchtitan runs it under
  pipelining, and the Llama 3 run, Dubey et al. 2024 sec. 3.3.2): weights gathered once per
  step, gradients accumulated unsharded and reduce-scattered once per step; memory holds the
  gathered weights and gradients for the whole step.
* HSDP (``dp_shard`` < dp): state sharded over ``dp_shard`` x cp ranks and replicated over
  ``dp / dp_shard``; gathers and reduce-scatters run inside the shard group, and the reduced
  gradient shard is all-reduced across the replicas (FSDP2 HSDP; torchtitan's
  ``data_parallel_shard_degree`` / ``replicate_degree``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.memory import state_bytes_per_param
from autotune.plan.plan import StagePlan
from autotune.spec.hardware import ClusterSpec

__all__ = ["GRAD_COMM_BYTES", "OVERLAP_COMPUTE_SLOWDOWN", "ShardGroups", "shard_groups", "zero3_microbatch_comm_s",
           "dp_step_comm_s", "sharded_state_memory", "grad_comm_bytes", "state_flags", "keeps_fp8_params", "overlapped_exposed_s", "overlap_penalty_s", "rate_share"]

# Compute that runs while a collective is in flight is slower: the collective's kernels hold SMs
# (NCCL runs one thread block per channel) and share HBM bandwidth. Lee et al. 2025 ("Characterizing
# Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114)
# measured an average computational slowdown of 18.9% (max 40%) on 4-GPU NVLink nodes of A100 and
# H100 (GPT, Llama layers).
OVERLAP_COMPUTE_SLOWDOWN = 0.189


def overlap_penalty_s(comm_s, window_s, rate_share=1.0):
    """Seconds the overlapped compute loses: the slowdown over the compute that runs beside the
    collective, scaled by ``rate_share``, the collective's per-GPU data rate over NVLink's (the rate
    the 18.9% was measured at): SM and HBM contention grow with the bytes per second it moves."""
    return OVERLAP_COMPUTE_SLOWDOWN * rate_share * np.minimum(comm_s, window_s)


def rate_share(span: GroupSpan, cluster: ClusterSpec) -> float:
    """A collective's per-GPU data rate over the intra-node link's (1 inside a node): across nodes
    the slower of an NVLink hop and the node's NICs shared by its ``n_intra`` members (cost/comm.py)."""
    intra, inter = cluster.intra_node, cluster.inter_node
    if span.size <= 1 or span.n_inter == 1:
        return 1.0
    per_byte = inter.beta_s_per_byte if span.n_intra == 1 else max(intra.beta_s_per_byte,
                                                                  inter.beta_s_per_byte / span.n_intra)
    return min(1.0, intra.beta_s_per_byte / per_byte) if per_byte > 0 else 1.0

# Bytes per gradient element in the data-parallel reduction. Megatron-LM reduces bf16 runs'
# gradients in fp32 (arguments.py forces accumulate_allreduce_grads_in_fp32 for bf16), as do
# FSDP under torchtitan (mixed_precision_reduce float32) and composer's DEFAULT mixed precision;
# fp16 runs reduce in fp16. FP8 recipes keep fp32 main gradients (Transformer Engine, torchao).
GRAD_COMM_BYTES = {"fp32": 4.0, "bf16": 4.0, "fp16": 2.0, "fp8": 4.0, "fp8_rowwise": 4.0, "mxfp8": 4.0, "nvfp4": 4.0}


def state_flags(runtime, dtype: str) -> tuple[bool, bool]:
    """(grad_reduce_in_fp32, fp8_params) of a runtime training in ``dtype``, for sharded_state_memory:
    weights are kept only in FP8 under the FP8 and MXFP8 recipes (no runtime keeps NVFP4 weights,
    Megatron-Bridge's bf16_with_nvfp4_mixed sets no fp8_param_gather)."""
    return runtime.grad_reduce_in_fp32, keeps_fp8_params(runtime, dtype)


def keeps_fp8_params(runtime, dtype: str) -> bool:
    """Whether the runtime holds the weights only in the GEMM format (Runtime.fp8_params) for ``dtype``."""
    return runtime.fp8_params and dtype in ("fp8", "fp8_rowwise", "mxfp8")


def grad_comm_bytes(runtime, dtype: str) -> float:
    """Bytes per gradient element in the data-parallel reduction: GRAD_COMM_BYTES, or 2 where the
    runtime reduces in 16 bits (Runtime.grad_reduce_in_fp32 False)."""
    if not runtime.grad_reduce_in_fp32 and dtype != "fp32":
        return 2.0
    return GRAD_COMM_BYTES[dtype]


@dataclass(frozen=True)
class ShardGroups:
    """The group holding one copy of the sharded state, and the group of its replicas."""

    shard: GroupSpan
    replicate: GroupSpan


def shard_groups(stage: StagePlan, dp_cp: GroupSpan) -> ShardGroups:
    """Split the stage's dp x cp group into shard groups of ``dp_shard x cp`` adjacent ranks
    (FSDP2's mesh puts the shard dimension innermost) and their replicas."""
    total = dp_cp.size
    shard_size = stage.shard_degree * stage.cp
    if shard_size >= total:
        return ShardGroups(shard=dp_cp, replicate=GroupSpan(1, 1))
    per_node = dp_cp.n_intra
    if shard_size <= per_node:
        return ShardGroups(shard=GroupSpan(shard_size, 1), replicate=GroupSpan(per_node // shard_size, dp_cp.n_inter))
    return ShardGroups(shard=GroupSpan(per_node, shard_size // per_node),
                       replicate=GroupSpan(1, total // shard_size))


def _reduce_fn(op: str, groups: ShardGroups, cluster: ClusterSpec) -> Callable:
    """Seconds to reduce ``nbytes`` of gradients: inside the shard group, then the shard across
    the replicas."""
    shard_n = groups.shard.size

    def reduce(nbytes):
        t = collective_time_s(op, nbytes, groups.shard, cluster)
        return t + collective_time_s("all_reduce", nbytes / shard_n, groups.replicate, cluster)
    return reduce


def overlapped_exposed_s(total_bytes, collective: Callable, window_s, bucket_bytes: float, overlap: bool,
                         share: float = 1.0):
    """Exposed time of a bucketed collective that overlaps a compute window.

    Seed 002's DDP model: with per-call overhead o and bandwidth w, n buckets leave
    n*o + s/(n*w) after the backward pass, optimal at bucket size sqrt(s*w*o). Generalised:
    buckets start as compute produces them, so the exposed part is the larger of the last
    bucket and the communication the window cannot hold; the compute beside the hidden part
    slows (overlap_penalty_s, ``share``: the collective's rate_share). Arrays broadcast.
    """
    total = np.asarray(total_bytes, dtype=float)
    if not overlap:
        exposed = collective(total)
    else:
        safe = np.maximum(total, 1.0)
        overhead_s = collective(1.0)
        per_byte_s = np.maximum((collective(safe) - overhead_s) / safe, 1e-30)
        bucket = bucket_bytes or np.sqrt(safe * overhead_s / per_byte_s)
        num_buckets = np.maximum(1.0, np.ceil(safe / np.maximum(bucket, 1.0)))
        bucket_s = collective(safe / num_buckets)
        exposed = np.maximum(bucket_s, num_buckets * bucket_s - window_s * (num_buckets - 1) / num_buckets)
        exposed = exposed + overlap_penalty_s(num_buckets * bucket_s - exposed, window_s, share)
    exposed = np.where(total > 0, exposed, 0.0)
    return float(exposed) if exposed.ndim == 0 else exposed


@dataclass(frozen=True, kw_only=True)
class LayerTraffic:
    """One layer's sharding traffic and the compute windows that can hide it (seconds)."""

    gather_s: float
    reduce_s: float
    fwd_s: float
    bwd_s: float  # backward incl. recomputation
    share: float = 1.0  # the shard group's rate_share (overlap contention)
    # A runtime gathering tensor by tensor (cost/zero3_calls.py TensorTraffic): it prices the
    # micro-batch itself; gather_s / reduce_s above are then the layer's sums.
    tensors: object = None


def layer_traffic(cluster: ClusterSpec, groups: ShardGroups, params, gather_bytes_per_param: float,
                  grad_bytes_per_param: float, fwd_s, bwd_s, gather_rate_bytes_per_s: float = 0.0) -> LayerTraffic:
    """``gather_rate_bytes_per_s`` > 0: the runtime receives each GPU's missing (n-1)/n of the
    layer no faster than that (a measured rate, TrainingWorkload.param_gather_bytes_per_s)."""
    gather = collective_time_s("all_gather", params * gather_bytes_per_param, groups.shard, cluster)
    if gather_rate_bytes_per_s > 0:
        missing = params * gather_bytes_per_param * (1.0 - 1.0 / groups.shard.size)
        gather = np.maximum(gather, missing / gather_rate_bytes_per_s)
    reduce = _reduce_fn("reduce_scatter", groups, cluster)(params * grad_bytes_per_param)
    return LayerTraffic(gather_s=gather, reduce_s=reduce, fwd_s=fwd_s, bwd_s=bwd_s,
                        share=rate_share(groups.shard, cluster))


def zero3_microbatch_comm_s(stage: StagePlan, traffic: LayerTraffic, n, overlap: bool):
    """Exposed ZeRO-3 seconds per micro-batch for ``n`` layers resharded after forward:
    gathers prefetched one layer ahead of forward and backward, gradient reduce-scatter
    behind the backward of the layer before; without overlap all of it is exposed."""
    if stage.zero < 3 or not stage.reshard_after_forward:
        return 0.0 * n
    t = traffic
    if t.tensors is not None:
        return n * t.tensors.exposed_s(overlap, stage.recompute == "full", t)
    if not overlap:
        return n * (2 * t.gather_s + t.reduce_s) + 0.0 * t.fwd_s
    per_layer = np.maximum(0.0, t.gather_s - t.fwd_s) + np.maximum(0.0, t.gather_s + t.reduce_s - t.bwd_s)
    per_layer = (per_layer + overlap_penalty_s(t.gather_s, t.fwd_s, t.share)
                 + overlap_penalty_s(t.gather_s + t.reduce_s, t.bwd_s, t.share))
    return t.gather_s + n * per_layer


def dp_step_comm_s(cluster: ClusterSpec, stage: StagePlan, groups: ShardGroups, *, params, fwd_s, bwd_s,
                   num_microbatches: int, gather_bytes_per_param: float, grad_bytes_per_param: float,
                   bucket_bytes: float, overlap_grad: bool, overlap_gather: bool, first_gather_s=0.0):
    """Exposed data-parallel seconds per step (the per-micro-batch ZeRO-3 traffic aside).

    ``fwd_s``/``bwd_s`` are one micro-batch's windows; ``first_gather_s`` is the exposed
    gathering of the first forward for zero 3 without resharding."""
    if groups.shard.size * groups.replicate.size <= 1:
        return 0.0 * params
    if stage.zero >= 3 and stage.reshard_after_forward:
        return 0.0 * params
    grad_bytes = params * grad_bytes_per_param
    if stage.zero == 0:
        whole = GroupSpan(groups.shard.n_intra * groups.replicate.n_intra,
                          groups.shard.n_inter * groups.replicate.n_inter)
        reduce = lambda nbytes: collective_time_s("all_reduce", nbytes, whole, cluster)  # noqa: E731
        return overlapped_exposed_s(grad_bytes, reduce, bwd_s, bucket_bytes, overlap_grad, rate_share(whole, cluster))
    reduce = _reduce_fn("reduce_scatter", groups, cluster)
    share = rate_share(groups.shard, cluster)
    exposed = overlapped_exposed_s(grad_bytes, reduce, bwd_s, bucket_bytes, overlap_grad, share)
    if stage.zero == 2:
        exposed = exposed * num_microbatches
    if stage.zero >= 3:  # gathered once per step, before the first forward
        return exposed + first_gather_s
    gather = lambda nbytes: collective_time_s("all_gather", nbytes, groups.shard, cluster)  # noqa: E731
    return exposed + overlapped_exposed_s(params * gather_bytes_per_param, gather, fwd_s, bucket_bytes, overlap_gather,
                                          share)


def sharded_state_memory(params, dtype: str, stage: StagePlan, gather_bytes_per_param: float,
                         grad_reduce_in_fp32: bool = True, fp8_params: bool = False):
    """(weights, gradients, optimizer states) bytes per GPU. ZeRO shards over ``dp_shard x
    cp`` ranks (Rajbhandari et al. SC'20, Fig. 1); zero 3 without resharding also holds the
    gathered weights and the unsharded gradients for the step (FSDP2 with
    reshard_after_forward=False and gradient sync once per step)."""
    per = state_bytes_per_param(dtype, grad_reduce_in_fp32, fp8_params)
    shards = stage.shard_degree * stage.cp
    zero = stage.zero
    weights = params * per.weights / (shards if zero >= 3 else 1)
    grads = params * per.gradients / (shards if zero >= 2 else 1)
    optim = params * (per.master + per.moments) / (shards if zero >= 1 else 1)
    if zero >= 3 and not stage.reshard_after_forward and shards > 1:
        weights = weights + params * gather_bytes_per_param
        grads = grads + params * per.gradients
    return weights, grads, optim
