"""Context parallelism: how the attention of a sequence split over ``cp`` ranks exchanges data.

Every variant assumes causal load balancing: the sequence is cut into 2 cp chunks and rank i
holds chunks i and 2cp-1-i, so each rank does the same share of the causal attention work
(Megatron-Core's context parallelism; torchtitan's/PyTorch's ``context_parallel`` with
round-robin sharding). Per layer and pass:

* ``ring`` (Liu et al. 2023, Ring Attention; Megatron-Core ``--cp-comm-type p2p``): cp - 1 steps,
  each sending the current K/V chunk to the next rank while attending to it; forward moves
  K and V, backward K, V and their gradients, so the exchange hides behind attention unless
  the link is slower than the attention blocks.
* ``all_gather`` (PyTorch's ``context_parallel``, its default rotate method ``allgather``, as
  torchtitan runs it; torch.distributed.tensor.experimental._attention): K and V are all-gathered
  once per layer, overlapped only with the local chunk's attention (step 0); backward gathers
  them again while the K/V gradients travel the ring in fp32, one hop per step (its dK/dV rotater
  is always all-to-all), each hop hidden behind the next step's backward kernel.
* ``all_to_all`` (DeepSpeed-Ulysses, Jacobs et al. 2023; Megatron-Core ``a2a``): Q, K and V
  are redistributed from sequence shards to head shards before attention and the output back
  after it, four all-to-alls forward and four backward, on the critical path; attention then
  runs whole-sequence on heads / cp heads (no partial kernels to merge).
"""

from __future__ import annotations

import numpy as np

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.sharding import overlap_penalty_s, rate_share
from autotune.spec.hardware import ClusterSpec, DeviceProfile

__all__ = ["CP_COMMS", "cp_layer_comm_s", "cp_step_overhead_s"]

CP_COMMS = ("ring", "all_gather", "all_to_all")

# PyTorch's context_parallel merges partial outputs and accumulates gradients in fp32
# (_ContextParallelOptions.convert_to_f32 = True).
_ACCUM_BYTES = 4.0


def cp_layer_comm_s(cluster: ClusterSpec, cp_comm: str, span: GroupSpan, *, kv_bytes, qkv_local_bytes,
                    out_local_bytes, fwd_attn_s, bwd_attn_s, recompute_forward: bool, act_bytes: float = 2.0):
    """Exposed seconds per layer of one micro-batch.

    ``kv_bytes``: K and V of the whole sequence (all cp ranks' chunks, this rank's TP share);
    ``qkv_local_bytes``/``out_local_bytes``: this rank's Q, K, V and attention output;
    ``fwd_attn_s``/``bwd_attn_s``: this rank's attention kernels; ``recompute_forward``: full
    recomputation repeats the forward exchange; ``act_bytes``: bytes of one K/V element."""
    cp = span.size
    share = rate_share(span, cluster)
    if cp_comm == "ring":
        ring = collective_time_s("all_gather", kv_bytes, span, cluster)  # cp - 1 chunk hops in all
        fwd = np.maximum(0.0, ring - fwd_attn_s) + overlap_penalty_s(ring, fwd_attn_s, share)
        bwd = np.maximum(0.0, 2 * ring - bwd_attn_s) + overlap_penalty_s(2 * ring, bwd_attn_s, share)
    elif cp_comm == "all_gather":
        gather = collective_time_s("all_gather", kv_bytes, span, cluster)
        step_bwd = bwd_attn_s / cp  # one ring step's backward kernel
        hop = collective_time_s("send_recv", kv_bytes / cp * _ACCUM_BYTES / act_bytes, span, cluster)
        fwd = np.maximum(0.0, gather - fwd_attn_s / cp) + overlap_penalty_s(gather, fwd_attn_s / cp, share)
        bwd = (np.maximum(0.0, gather - step_bwd) + overlap_penalty_s(gather, step_bwd, share)
               + (cp - 1) * (np.maximum(0.0, hop - step_bwd) + overlap_penalty_s(hop, step_bwd, share))
               + hop)  # the last hop returns each rank's gradients after the last kernel
    elif cp_comm == "all_to_all":
        one = (collective_time_s("all_to_all", qkv_local_bytes, span, cluster)
               + collective_time_s("all_to_all", out_local_bytes, span, cluster))
        fwd, bwd = one + 0.0 * fwd_attn_s, one + 0.0 * bwd_attn_s
    else:
        raise ValueError(f"unknown context-parallel exchange {cp_comm!r}")
    return fwd + bwd + (fwd if recompute_forward else 0.0)


def cp_step_overhead_s(device: DeviceProfile, cp_comm: str, cp: int, *, local_out_elems, kv_per_out: float,
                       act_bytes: float, recompute_forward: bool, dtype: str = "bf16"):
    """Seconds per layer of one micro-batch that running attention as ``cp`` ring steps adds
    beside the attention kernels' FLOPs: the extra kernel launches and the memory-bound merges.
    ``local_out_elems``: this rank's attention output elements (its Q has as many);
    ``kv_per_out``: K and V elements per output element (2 x kv width / q width); ``dtype``: the
    workload's, whose attention fit's launch latency each extra kernel pays."""
    if cp <= 1 or cp_comm == "all_to_all":  # Ulysses runs one whole-sequence kernel per head shard
        return 0.0
    extra = cp - 1
    attn_launch = device.regression("attention", dtype).latency_s
    if cp_comm == "ring":
        # Megatron-Core's ring: each merge reads the partial and running outputs and writes the
        # running one (3 x the local output bytes) forward, twice that backward.
        launches, kernels = 2 * extra * attn_launch, 3 * extra
        merged_bytes = 3 * extra * 3.0 * act_bytes * local_out_elems
    else:
        fwd_b, bwd_b = _torch_ring_bytes_per_out(cp, kv_per_out, act_bytes)
        fwd_b = fwd_b * (2 if recompute_forward else 1)
        launches = (2 + recompute_forward) * extra * attn_launch
        kernels = (2 + recompute_forward) * extra * _TORCH_STEP_KERNELS
        merged_bytes = (fwd_b + bwd_b) * local_out_elems
    memory = device.memory
    return (launches + kernels * memory.latency_s + merged_bytes * memory.seconds_per_unit) / device.kernel_efficiency


# Memory-bound kernels PyTorch's ring step launches beside the attention kernel: the K/V cat, the
# fp32 cast, sub, sigmoid, mul, sub of the output merge and sub, logsigmoid of the log-sum-exp
# (forward); the cat and the fp32 adds of dQ, dK, dV (backward): about 8 either way.
_TORCH_STEP_KERNELS = 8


def _torch_ring_bytes_per_out(cp: int, kv_per_out: float, e: float) -> tuple[float, float]:
    """HBM bytes per local output element that PyTorch's templated ring attention moves outside
    its attention kernels (torch.distributed.tensor.experimental._attention, fp32 merging).
    Load balancing makes half the steps (on average over ranks) partial: only the second half of
    Q attends, its merge touches half the output and a cat rebuilds the whole (read and write fp32).

    Forward: each step but the last cats K and V to send (read + write, ``kv_per_out`` x 2e); each
    step casts its output to fp32 (e + 4) and merges it, out - sigmoid(lse_b - lse) (out - out_b):
    12 + 8 + 12 = 32 bytes; the first step's cast and the final cast back (e + 4) bracket them.
    Backward: fp32 zeros for dQ, dK, dV (4 each); per step a K/V cat (but the last), an fp32 add
    of the kernel's bf16 dQ, dK, dV (8 + e, half of them partial with the fp32 cat: 0.75 (8 + e) + 4)
    and a cat of dK, dV to send (8); a final cast of dQ, dK, dV (4 + e). Each extra backward
    kernel call also repeats FlashAttention-2's per-call passes over its Q rows (flash_bwd_launch_
    template: rowsum(dO * O) reads 2e, the fp32 dQ accumulator is zeroed (4), then converted (4 + e)):
    8 + 3e per Q element, three quarters of the output on average. Both passes first copy K and V
    contiguous (key.contiguous(), value.contiguous(): 2e per K/V element; the K/V they get are
    transposed views, as torchtitan's model hands SDPA)."""
    qkv = 1.0 + kv_per_out
    merge = 0.5 * (e + 4 + 32) + 0.5 * (0.5 * (e + 4 + 32) + 8)  # full and partial steps
    fwd = 2 * (e + 4) + 2 * e * kv_per_out + (cp - 1) * (2 * e * kv_per_out + merge)
    add = 0.75 * (8 + e) + 4
    bwd = (4 * qkv + 2 * e * kv_per_out + (cp - 1) * (2 * e * kv_per_out + 0.75 * (8 + 3 * e))
           + cp * (add * qkv + 8 * kv_per_out) + (4 + e) * qkv)
    return fwd, bwd
