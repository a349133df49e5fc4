"""Context parallelism: how the attention of a sequence split over ``cp`` ranks exchanges data.

Every variant assumes causal load balancing: the sequence is cut into 2 cp chunks and rank i
holds chunks i and 2cp-1-i, so each rank does the same share of the causal attention work
(Megatron-Core's context parallelism; torchtitan's/PyTorch's ``context_parallel`` with
round-robin sharding). Per layer and pass:

* ``ring`` (Liu et al. 2023, Ring Attention; Megatron-Core ``--cp-comm-type p2p``): cp - 1 steps,
  each sending the current K/V chunk to the next rank while attending to it; forward moves
  K and V, backward K, V and their gradients, so the exchange hides behind attention unless
  the link is slower than the attention blocks.
* ``all_gather`` (Megatron-Core ``allgather``; PyTorch's default rotate method): K and V are
  all-gathered once per layer, overlapped only with the local chunk's attention; backward
  gathers them again and reduce-scatters their gradients.
* ``all_to_all`` (DeepSpeed-Ulysses, Jacobs et al. 2023; Megatron-Core ``a2a``): Q, K and V
  are redistributed from sequence shards to head shards before attention and the output back
  after it, four all-to-alls forward and four backward, on the critical path; attention then
  runs whole-sequence on heads / cp heads (no partial kernels to merge).
"""

from __future__ import annotations

import numpy as np

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.sharding import overlap_penalty_s, rate_share
from autotune.spec.hardware import ClusterSpec

__all__ = ["CP_COMMS", "cp_layer_comm_s"]

CP_COMMS = ("ring", "all_gather", "all_to_all")


def cp_layer_comm_s(cluster: ClusterSpec, cp_comm: str, span: GroupSpan, *, kv_bytes, qkv_local_bytes,
                    out_local_bytes, fwd_attn_s, bwd_attn_s, recompute_forward: bool):
    """Exposed seconds per layer of one micro-batch.

    ``kv_bytes``: K and V of the whole sequence (all cp ranks' chunks, this rank's TP share);
    ``qkv_local_bytes``/``out_local_bytes``: this rank's Q, K, V and attention output;
    ``fwd_attn_s``/``bwd_attn_s``: this rank's attention kernels; ``recompute_forward``: full
    recomputation repeats the forward exchange."""
    cp = span.size
    share = rate_share(span, cluster)
    if cp_comm == "ring":
        ring = collective_time_s("all_gather", kv_bytes, span, cluster)  # cp - 1 chunk hops in all
        fwd = np.maximum(0.0, ring - fwd_attn_s) + overlap_penalty_s(ring, fwd_attn_s, share)
        bwd = np.maximum(0.0, 2 * ring - bwd_attn_s) + overlap_penalty_s(2 * ring, bwd_attn_s, share)
    elif cp_comm == "all_gather":
        gather = collective_time_s("all_gather", kv_bytes, span, cluster)
        scatter = collective_time_s("reduce_scatter", kv_bytes, span, cluster)
        fwd = np.maximum(0.0, gather - fwd_attn_s / cp) + overlap_penalty_s(gather, fwd_attn_s / cp, share)
        bwd = np.maximum(0.0, gather + scatter - bwd_attn_s / cp) + overlap_penalty_s(gather + scatter, bwd_attn_s / cp, share)
    elif cp_comm == "all_to_all":
        one = (collective_time_s("all_to_all", qkv_local_bytes, span, cluster)
               + collective_time_s("all_to_all", out_local_bytes, span, cluster))
        fwd, bwd = one + 0.0 * fwd_attn_s, one + 0.0 * bwd_attn_s
    else:
        raise ValueError(f"unknown context-parallel exchange {cp_comm!r}")
    return fwd + bwd + (fwd if recompute_forward else 0.0)
