"""Collective communication on a hierarchical device mesh (alpha-beta per mesh dimension).

A group of ``n`` ranks that spans ``n_inter`` nodes with ``n_intra`` members in each uses the
intra-node level for the first factor and the inter-node level for the second. Formulas:

* ring all-reduce: 2(n-1) steps, each rank moves 2(n-1)/n of the buffer (Patarasuk & Yuan 2009);
* tree all-reduce: 2 log2(n) steps, 2x the buffer per rank; NCCL picks the faster of the two
  (NCCL's tuning model, src/graph/tuning.cc), so do we;
* all-gather / reduce-scatter: n-1 steps, (n-1)/n of the (gathered) buffer;
* all-to-all: n-1 steps, (n-1)/n of the buffer, the cross-node share over the network;
* send/recv: one step, the whole message;
* two levels: NCCL runs one ring (or tree) through all ranks, pipelining NVLink and network
  hops, with one channel per NIC; its per-rank bus bandwidth is the slower of an NVLink hop and
  n_intra NICs (e.g. 8 x 24 GB/s = 192 GB/s on DGX A100, the figure NCCL's maintainers quote
  in NVIDIA/nccl#812). Latency: 2(nodes-1) network steps, the rest NVLink steps (tuning.cc).

Measured fits in ``LinkLevel.collectives`` (from ``autotune profile``) replace the formulas
for the (collective, group size) they were measured at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.spec.hardware import ClusterSpec, LinkLevel

__all__ = ["GroupSpan", "RingProtocol", "NCCL_2_8_RING", "collective_time_s", "level_time_s", "nccl_2_8_ring_s",
           "tp_collective_bytes"]

# Inputs may be floats or numpy arrays of byte counts (the search scores many stage sizes at
# once); zero or negative byte counts cost nothing.


def _only_positive(nbytes, seconds):
    if isinstance(nbytes, np.ndarray):
        return np.where(nbytes > 0, seconds, 0.0)
    return float(seconds) if nbytes > 0 else 0.0


@dataclass(frozen=True)
class GroupSpan:
    """How a parallel group sits on the mesh: ``n_intra`` members per node, ``n_inter`` nodes."""

    n_intra: int
    n_inter: int

    @property
    def size(self) -> int:
        return self.n_intra * self.n_inter


def level_time_s(op: str, nbytes: float, n: int, link: LinkLevel) -> float:
    """One collective over ``n`` ranks on a single level. ``nbytes``: the full buffer."""
    if n <= 1:
        return _only_positive(nbytes, 0.0)
    measured = link.collectives.get((op, n))
    if measured is not None:
        return _only_positive(nbytes, measured.time_s(nbytes))
    alpha, beta, base = link.alpha_s, link.beta_s_per_byte, link.latency_s
    if op == "all_reduce":
        ring = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta
        tree = 2 * math.ceil(math.log2(n)) * alpha + 2 * nbytes * beta
        return _only_positive(nbytes, base + np.minimum(ring, tree))
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return _only_positive(nbytes, base + (n - 1) * alpha + (n - 1) / n * nbytes * beta)
    if op == "send_recv":
        return _only_positive(nbytes, base + alpha + nbytes * beta)
    raise ValueError(f"unknown collective {op!r}")


# A search prices the same collective (op, bytes, group, cluster) many times over (the
# recomputation, ZeRO and mesh-order choices of a stage share their TP and most of their DP
# traffic): collective_time_s is pure, so its results are kept, keyed by the cluster object
# (held with the entry, so a recycled id never matches) and the bytes' exact contents.
# Array results are shared, hence read-only. Cleared when it grows past _MEMO_MAX entries.
_MEMO: dict = {}
_MEMO_MAX = 1 << 16


def collective_time_s(op: str, nbytes: float, span: GroupSpan, cluster: ClusterSpec) -> float:
    """A collective over a group spanning one or two mesh levels (memoised, see _MEMO)."""
    if type(nbytes) is np.ndarray:
        key = (op, span.n_intra, span.n_inter, id(cluster), nbytes.shape, nbytes.dtype.char, nbytes.tobytes())
    else:
        key = (op, span.n_intra, span.n_inter, id(cluster), type(nbytes), nbytes)
    found = _MEMO.get(key)
    if found is not None and found[0] is cluster:
        return found[1]
    value = _collective_time_s(op, nbytes, span, cluster)
    if type(value) is np.ndarray:
        value.flags.writeable = False
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = (cluster, value)
    return value


def _collective_time_s(op: str, nbytes: float, span: GroupSpan, cluster: ClusterSpec) -> float:
    intra, inter = cluster.intra_node, cluster.inter_node
    n = span.size
    if n <= 1:
        return _only_positive(nbytes, 0.0)
    if span.n_inter == 1:
        return level_time_s(op, nbytes, n, intra)
    if span.n_intra == 1:
        return level_time_s(op, nbytes, n, inter)
    # NCCL's rings cross both levels at once: per byte the slower of an NVLink hop and the
    # node's n_intra NICs, which the group's n_intra channels share (one NIC per GPU on DGX).
    beta = max(intra.beta_s_per_byte, inter.beta_s_per_byte / span.n_intra)
    inter_steps, intra_steps = span.n_inter - 1, n - span.n_inter
    step_s = intra_steps * intra.alpha_s + inter_steps * inter.alpha_s
    base = inter.latency_s
    if op == "all_reduce":
        ring = 2 * step_s + 2 * (n - 1) / n * nbytes * beta
        tree = (2 * ((span.n_intra - 1) * intra.alpha_s + math.ceil(math.log2(span.n_inter)) * inter.alpha_s)
                + 2 * nbytes * beta)
        return _only_positive(nbytes, base + np.minimum(ring, tree))
    if op in ("all_gather", "reduce_scatter"):
        return _only_positive(nbytes, base + step_s + (n - 1) / n * nbytes * beta)
    if op == "all_to_all":
        cross = (n - span.n_intra) / n * nbytes * inter.beta_s_per_byte
        local = (span.n_intra - 1) / n * nbytes * intra.beta_s_per_byte
        return _only_positive(nbytes, base + (n - 1) * inter.alpha_s + np.maximum(cross, local))
    return level_time_s(op, nbytes, 2, inter)


def tp_collective_bytes(op: str, act_bytes, runtime, dtype: str, bytes_per_element: float):
    """Bytes a sequence-parallel TP collective moves: all-gathers in the GEMMs' low-precision format
    where the runtime casts before gathering in that recipe (Runtime.fp8_tp_all_gather and
    tp_gather_dtypes), else ``act_bytes``."""
    from autotune.spec.workload import GEMM_OPERAND_BYTES

    if op != "all_gather" or not runtime.fp8_tp_all_gather or dtype not in runtime.tp_gather_dtypes:
        return act_bytes
    return act_bytes * GEMM_OPERAND_BYTES[dtype] / bytes_per_element


@dataclass(frozen=True)
class RingProtocol:
    """One NCCL protocol's ring model: base and per-step latencies (s), the share of the bus
    bandwidth it keeps, and its caps (bytes/s) per channel and in all."""

    name: str
    base_s: float
    nvlink_step_s: float
    net_step_s: float
    bandwidth_share_intra: float
    bandwidth_share_inter: float
    per_channel_cap: float = math.inf
    caps: tuple[float, float, float] = (math.inf, math.inf, math.inf)  # one node, two nodes, more


# NCCL 2.8's tuning model (NVIDIA/nccl src/graph/tuning.cc at v2.8.4-1), ring all-gather /
# reduce-scatter on Ampere over NVLink and the network: baseLat, hwLat[NVLINK|NET][RING], LL's
# intra-node step x1.8 across nodes and its bandwidth /3 in a node, /4 across nodes, capped at
# llMaxBws (Ampere in one node 87.7 GB/s; AMD hosts, as DGX A100's, 22.5 on 2 nodes, 19.0 on more); LL128 x0.92, capped per channel at 18.3 GB/s
# (ll128MaxBwPerCh, all-gather; 15.2 reduce-scatter is taken as the same). NCCL runs the protocol
# with the least latency + bytes / bandwidth (ncclTopoGetAlgoTime). The ring constants are the same
# in 2.7.8 (PyTorch 1.8's wheels); "the latency of ring increases linearly with the communicator
# size" (NCCL maintainer, NVIDIA/nccl#1712).
NCCL_2_8_RING = (
    RingProtocol("LL", 3.6e-6, 0.47e-6, 2.7e-6, 1 / 3, 1 / 4, caps=(87.7e9, 22.5e9, 19.0e9)),
    RingProtocol("LL128", 10.0e-6, 1.9e-6, 4.0e-6, 0.92, 0.92, per_channel_cap=18.3e9),
    RingProtocol("Simple", 8.4e-6, 3.4e-6, 9.6e-6, 1.0, 1.0),
)


def nccl_2_8_ring_s(op: str, nbytes: float, span: GroupSpan, cluster: ClusterSpec) -> tuple[float, float]:
    """(latency s, transfer s) of a ring all-gather or reduce-scatter of ``nbytes`` (the gathered
    buffer) under NCCL 2.8's model: steps n-1, nodes-1 of them over the network; bus bandwidth as
    collective_time_s (one channel per GPU of the node, NVIDIA/nccl#812)."""
    if op not in ("all_gather", "reduce_scatter"):
        raise ValueError(f"NCCL 2.8 ring model prices all_gather and reduce_scatter, not {op!r}")
    n = span.size
    if n <= 1:
        return 0.0 * nbytes, 0.0 * nbytes
    intra, inter = cluster.intra_node, cluster.inter_node
    multi = span.n_inter > 1
    beta = (inter.beta_s_per_byte if span.n_intra == 1 else max(intra.beta_s_per_byte,
            inter.beta_s_per_byte / span.n_intra)) if multi else intra.beta_s_per_byte
    inter_steps = span.n_inter - 1
    best_latency, best_transfer = None, None
    for proto in NCCL_2_8_RING:
        intra_step = proto.nvlink_step_s * (1.8 if multi and proto.name == "LL" else 1.0)
        latency = proto.base_s + (n - 1 - inter_steps) * intra_step + inter_steps * proto.net_step_s
        share = proto.bandwidth_share_inter if multi else proto.bandwidth_share_intra
        cap = proto.caps[min(span.n_inter, 3) - 1]
        transfer = (n - 1) / n * np.asarray(nbytes, dtype=float) / min(share / beta, proto.per_channel_cap * span.n_intra, cap)
        if best_latency is None:
            best_latency, best_transfer = np.full_like(transfer, latency), transfer
        else:  # NCCL takes the fastest protocol for each size
            faster = latency + transfer < best_latency + best_transfer
            best_latency, best_transfer = np.where(faster, latency, best_latency), np.where(faster, transfer, best_transfer)
    return _only_positive(nbytes, best_latency), _only_positive(nbytes, best_transfer)
