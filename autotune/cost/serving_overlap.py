"""The MoE token exchange as SGLang runs it with DeepEP, and its two-batch overlap.

SGLang's ``--enable-deepep-moe`` exchanges a MoE layer's tokens with DeepEP's kernels
(deepseek-ai/DeepEP README @1a0c8f6, the revision of the LMSYS 96-H100 post of 2025-05-05):

- normal kernels (``--deepep-mode normal``, prefill): a token crosses the network once per node its
  experts sit on and is forwarded over NVLink inside that node; dispatched in FP8 with one FP32 scale
  per 128 values (tests/test_internode.py: ``fp8_factor = (1 + 4 / 128) / 2`` of BF16), combined in
  BF16. The README measures, on H800 with one CX7 400 Gb/s NIC per GPU (~50 GB/s), the RDMA
  bandwidth over every node copy of a token (test_internode.py's ``num_rdma_token_sent``, the token's
  own node included): 43 / 58 / 51 GB/s dispatch and 43 / 57 / 50 GB/s combine at EP16 / 32 / 64;
  inside one node 153 GB/s dispatch and 158 GB/s combine over NVLink (~160 GB/s) per rank copy.
- low-latency kernels (``--deepep-mode low_latency``, decode): every one of a token's k expert
  copies goes by RDMA, FP8 dispatch of ``hidden + hidden / 128 * 4 + 16`` bytes, BF16 combine
  (tests/test_low_latency.py), at 46 / 43 / 41 / 40 / 39 / 39 GB/s dispatch and 46 / 44 / 41 / 41 /
  39 / 40 GB/s combine at EP 8 / 16 / 32 / 64 / 128 / 256 (128 tokens a rank).

The bandwidths are the README's, scaled by the cluster's inter-node (intra-node) bandwidth over the
~50 (~160) GB/s they were measured at.

``--enable-two-batch-overlap`` (SGLang two_batch_overlap.py, operations_strategy.py: the DeepSeek
blog's prefill and decode strategies) splits a step's batch into two micro-batches of half the
tokens (decode: half the requests; prefill: half the prompt tokens) and interleaves them so one's
dispatch and combine run while the other computes. Priced as two in-order streams, compute and
exchange, over the MoE layers (two_batch_s): each micro-batch's layer is its compute then its
exchange, so the step is about 2 max(compute, exchange) of a half batch per layer plus the
unoverlapped ends, with every kernel at the half batch's efficiency. Under the normal kernels the
overlapped compute runs on the SMs DeepEP leaves it (SGLang gives DeepGEMM total SMs minus
DeepEPConfig.num_sms, DeepEP's Buffer.num_sms = 20; moe_stage.EP_COMM_SM_SHARE); the low-latency
kernels hold no SM while their data is in flight (DeepEP README: the hook-based overlap "does not
occupy any SM resource").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import comb, log

from autotune.cost.moe_stage import EP_COMM_SM_SHARE
from autotune.errors import require
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

__all__ = ["MoeExchange", "DEEPEP_MODES", "exchange_from_notes", "deepep_exchange_s", "two_batch_s", "overlapped_step_s"]

DEEPEP_MODES = ("normal", "low_latency")

# DeepEP README @1a0c8f6 "Performance": bandwidth (bytes/s) by EP size, (dispatch, combine)
_NORMAL_RDMA = {16: (43e9, 43e9), 32: (58e9, 57e9), 64: (51e9, 50e9)}
_NORMAL_NVLINK = (153e9, 158e9)  # intranode EP8
_LOW_LATENCY = {8: (46e9, 46e9), 16: (43e9, 44e9), 32: (41e9, 41e9), 64: (40e9, 41e9), 128: (39e9, 39e9),
                256: (39e9, 40e9)}
_README_NIC = 50e9  # "CX7 InfiniBand 400 Gb/s RDMA network card (~50 GB/s maximum bandwidth)"
_README_NVLINK = 160e9  # "H800 (~160 GB/s NVLink maximum bandwidth)"
_BF16 = 2.0


@dataclass(frozen=True, kw_only=True)
class MoeExchange:
    """How a deployment exchanges its MoE tokens: DeepEP in ``mode`` (normal or low_latency), with
    ``two_batch_overlap`` or without."""

    mode: str
    two_batch_overlap: bool = False

    def __post_init__(self) -> None:
        require(self.mode in DEEPEP_MODES, "deepep_mode", f"{self.mode!r}; choose one of: {', '.join(DEEPEP_MODES)}")
        require(isinstance(self.two_batch_overlap, bool), "two_batch_overlap", "must be true or false")


def exchange_from_notes(notes: str, phase: str) -> MoeExchange | None:
    """The exchange a row's launch flags name: SGLang's ``--enable-deepep-moe`` (or ``--moe-a2a-backend
    deepep``) with ``--deepep-mode`` (auto: normal for prefill, low_latency for decode, as SGLang's
    DeepEPMode.resolve does) and ``--enable-two-batch-overlap``; None where no DeepEP flag is given."""
    if not re.search(r"--enable-deepep-moe\b|--moe-a2a-backend[ =]deepep\b", notes):
        return None
    found = re.search(r"--deepep-mode[ =](\w+)", notes)
    mode = found.group(1) if found else "auto"
    if mode == "auto":
        mode = "normal" if phase == "prefill" else "low_latency"
    return MoeExchange(mode=mode, two_batch_overlap=bool(re.search(r"--enable-two-batch-overlap\b", notes)))


def _nearest(table: dict[int, tuple[float, float]], ep: int) -> tuple[float, float]:
    return table[min(table, key=lambda size: abs(log(size / ep)))]


def _copies(model: ModelSpec, parts: int) -> float:
    """Expected distinct parts (nodes or ranks, experts split evenly) one token's k experts reach under
    uniform routing, within its router groups where groups map onto whole parts (DeepSeek's n_group /
    topk_group: 8 groups, 4 a token)."""
    e, k = model.num_experts, model.num_experts_per_token
    groups, picked = model.router_groups, model.router_group_topk
    if groups and picked and groups % parts == 0:
        per_part, size = groups // parts, e // groups
        # P(part missed) = sum over j of its groups picked: P(j) x P(no expert of k in them)
        missed = sum(comb(per_part, j) * comb(groups - per_part, picked - j) / comb(groups, picked)
                     * comb((picked - j) * size, k) / comb(picked * size, k) for j in range(min(per_part, picked) + 1))
    else:
        missed = comb(e - e // parts, k) / comb(e, k)
    return parts * (1.0 - missed)


def deepep_exchange_s(model: ModelSpec, cluster: ClusterSpec, *, ep: int, tokens_per_rank: float, mode: str) -> float:
    """Seconds of one MoE layer's DeepEP dispatch plus combine for a rank sending ``tokens_per_rank``."""
    require(mode in DEEPEP_MODES, "deepep_mode", f"{mode!r}; choose one of: {', '.join(DEEPEP_MODES)}")
    h, k = model.hidden_size, model.num_experts_per_token
    fp8 = h * (1.0 + 4.0 / 128.0)  # FP8 values and one FP32 scale per 128
    nic = cluster.inter_node.bandwidth_bytes_per_s / _README_NIC
    if mode == "low_latency":
        dispatch, combine = _nearest(_LOW_LATENCY, ep)
        return tokens_per_rank * k * ((fp8 + 16.0) / (dispatch * nic) + h * _BF16 / (combine * nic))
    nodes = -(-ep // cluster.gpus_per_node)
    if nodes == 1:
        nvl = cluster.intra_node.bandwidth_bytes_per_s / _README_NVLINK
        dispatch, combine = (b * nvl for b in _NORMAL_NVLINK)
        copies = _copies(model, ep)
    else:
        dispatch, combine = (b * nic for b in _nearest(_NORMAL_RDMA, ep))
        copies = _copies(model, nodes)
    return tokens_per_rank * copies * (fp8 / dispatch + h * _BF16 / combine)


def two_batch_s(compute_s: float, exchange_s: float, layers: int) -> float:
    """Seconds of ``layers`` layers run as two micro-batches on two in-order streams: each micro-batch's
    layer computes (``compute_s``) then exchanges (``exchange_s``); the compute stream alternates the
    micro-batches, as does the exchange stream, and a micro-batch's next layer waits for its exchange."""
    require(compute_s >= 0 and exchange_s >= 0 and layers >= 1, "two_batch_overlap",
            f"needs non-negative times and a layer, got {compute_s}, {exchange_s}, {layers}")
    compute_free = exchange_free = 0.0
    ready = [0.0, 0.0]  # when each micro-batch's last exchange ends
    for _ in range(layers):
        for batch in (0, 1):
            compute_free = max(compute_free, ready[batch]) + compute_s
            exchange_free = max(exchange_free, compute_free) + exchange_s
            ready[batch] = exchange_free
    return max(compute_free, exchange_free)


def overlapped_step_s(*, compute_half_s: float, exchange_half_s: float, moe_layers: int, mode: str) -> float:
    """A step under two-batch overlap from one micro-batch's compute and exchange seconds (all layers):
    per MoE layer a micro-batch computes its share, then exchanges; under DeepEP's normal kernels the
    compute that runs beside an exchange runs on the SMs the exchange leaves."""
    per_layer_c, per_layer_x = compute_half_s / moe_layers, exchange_half_s / moe_layers
    if mode == "normal":
        per_layer_c += min(per_layer_c, per_layer_x) * EP_COMM_SM_SHARE / (1.0 - EP_COMM_SM_SHARE)
    return two_batch_s(per_layer_c, per_layer_x, moe_layers)
