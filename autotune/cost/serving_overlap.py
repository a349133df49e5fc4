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
~50 (~160) GB/s they were measured at. SGLang's NVFP4 experts on the CuTe DSL runner can take their
low-latency dispatch in NVFP4 (0.5.3 token_dispatcher/deepep.py _dispatch_core: use_nvfp4 under
SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH; flashinfer_cutedsl_moe.py takes k // 2 packed bytes and k // 16 E4M3 scales
a token; LMSYS GB200 part II: "Fusing NVFP4 in DeepEP ... halving the required network traffic").

``--enable-two-batch-overlap`` (SGLang two_batch_overlap.py and operations_strategy.py, the
DeepSeek blog's prefill and decode strategies) splits a step's batch into two micro-batches of half
the tokens (decode: half the requests; prefill: half the prompt tokens) and runs their layers' stages
interleaved, so one micro-batch's dispatch and combine are in flight while the other computes
(two_batch_s plays SGLang's stage order over two streams: compute, and the exchanges). The step is
then about the larger of the two streams' work plus the unoverlapped ends, with every kernel at the
half batch's efficiency; an exchange longer than the compute it overlaps still waits. Under the
normal kernels the compute beside an exchange runs on the SMs DeepEP leaves (DeepEP's
Buffer.num_sms = 20 of 132; SGLang gives DeepGEMM the rest: moe_stage.EP_COMM_SM_SHARE); the
low-latency kernels hold no SM while their data is in flight (DeepEP README: the hook-based overlap
"does not occupy any SM resource").

The experts' part of a layer is the busiest EP rank's (cost/moe_skew.py: skewed routing, or a load
balancer's residue where the notes name one; the LMSYS post: 50,302 tokens/s a node with SGLang's
default expert distribution, 59,337 with a simulated perfect EPLB, 4k prompts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import comb, log

from autotune.cost.moe_stage import EP_COMM_SM_SHARE
from autotune.errors import require
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

__all__ = ["MoeExchange", "LayerParts", "DEEPEP_MODES", "exchange_from_notes", "deepep_exchange_s", "two_batch_s",
           "overlapped_step_s"]

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
    nvfp4_dispatch: bool = False  # NVFP4 experts dispatched in NVFP4 (low-latency kernels), else FP8

    def __post_init__(self) -> None:
        require(self.mode in DEEPEP_MODES, "deepep_mode", f"{self.mode!r}; choose one of: {', '.join(DEEPEP_MODES)}")
        require(isinstance(self.two_batch_overlap, bool), "two_batch_overlap", "must be true or false")
        require(isinstance(self.nvfp4_dispatch, bool), "nvfp4_dispatch", "must be true or false")


def exchange_from_notes(notes: str, phase: str) -> MoeExchange | None:
    """The exchange a row's launch flags name: SGLang's ``--enable-deepep-moe`` (or ``--moe-a2a-backend
    deepep``) with ``--deepep-mode`` (auto: normal for prefill, low_latency for decode, as SGLang's
    DeepEPMode.resolve does) and ``--enable-two-batch-overlap``, or a source's words for them ("DeepEP
    low_latency"; the overlap only from its flag); None where no DeepEP is named."""
    if not re.search(r"--enable-deepep-moe\b|--moe-a2a-backend[ =]deepep\b|\bdeepep\b", notes, re.I):
        return None
    found = (re.search(r"--deepep-mode[ =](\w+)", notes)
             or re.search(r"\bdeepep[ _-]+(?:mode[ =:]+)?(low[_ -]latency|normal|auto)\b", notes, re.I))
    mode = re.sub(r"[ -]", "_", found.group(1).lower()) if found else "auto"
    if mode == "auto":
        mode = "normal" if phase == "prefill" else "low_latency"
    return MoeExchange(mode=mode, two_batch_overlap=bool(re.search(r"--enable-two-batch-overlap\b", notes)),
                       nvfp4_dispatch=mode == "low_latency" and bool(re.search(_NVFP4_DISPATCH, notes, re.I)))


# NVFP4 dispatch as SGLang's environment (0.5.3: SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH; later SGLANG_MOE_NVFP4_DISPATCH)
# or a source's words name it (LMSYS GB200 part II: "Fusing NVFP4 in DeepEP")
_NVFP4_DISPATCH = r"SGLANG_(?:CUTEDSL_)?MOE_NVFP4_DISPATCH[ =:'\"]+(?:1|true)\b|\bNVFP4 in DeepEP\b|\bNVFP4 dispatch\b"


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


def deepep_exchange_s(model: ModelSpec, cluster: ClusterSpec, *, ep: int, tokens_per_rank: float,
                      mode: str, nvfp4: bool = False) -> tuple[float, float]:
    """Seconds of one MoE layer's DeepEP (dispatch, combine) for a rank sending ``tokens_per_rank``;
    ``nvfp4``: the low-latency dispatch in NVFP4 (MoeExchange.nvfp4_dispatch with NVFP4 experts)."""
    require(mode in DEEPEP_MODES, "deepep_mode", f"{mode!r}; choose one of: {', '.join(DEEPEP_MODES)}")
    h, k = model.hidden_size, model.num_experts_per_token
    fp8 = h * (1.0 + 4.0 / 128.0)  # FP8 values and one FP32 scale per 128
    if nvfp4 and mode == "low_latency":
        fp8 = h * (0.5 + 1.0 / 16.0)  # FP4 values packed two a byte and one E4M3 scale per 16 (flashinfer_cutedsl_moe.py)
    nic = cluster.inter_node.bandwidth_bytes_per_s / _README_NIC
    nodes = -(-ep // cluster.gpus_per_node)
    if mode == "low_latency" and nodes == 1:  # one NVLink domain (GB200 NVL72): the copies go over NVLink,
        # at the rate DeepEP's NVLink kernels reach (the README's intranode figures, scaled to the cluster)
        dispatch, combine = (b * cluster.intra_node.bandwidth_bytes_per_s / _README_NVLINK for b in _NORMAL_NVLINK)
        return tokens_per_rank * k * (fp8 + 16.0) / dispatch, tokens_per_rank * k * h * _BF16 / combine
    if mode == "low_latency":
        dispatch, combine = _nearest(_LOW_LATENCY, ep)
        return tokens_per_rank * k * (fp8 + 16.0) / (dispatch * nic), tokens_per_rank * k * h * _BF16 / (combine * nic)
    if nodes == 1:
        nvl = cluster.intra_node.bandwidth_bytes_per_s / _README_NVLINK
        dispatch, combine = (b * nvl for b in _NORMAL_NVLINK)
        copies = _copies(model, ep)
    else:
        dispatch, combine = (b * nic for b in _nearest(_NORMAL_RDMA, ep))
        copies = _copies(model, nodes)
    return tokens_per_rank * copies * fp8 / dispatch, tokens_per_rank * copies * h * _BF16 / combine


@dataclass(frozen=True, kw_only=True)
class LayerParts:
    """One micro-batch's seconds in one MoE layer: ``other`` (projections, norms, gate, shared experts:
    every operator but attention's core and the routed experts), ``attention`` (the core over the cached
    or causal positions), ``experts`` (routed grouped GEMMs) and DeepEP's ``dispatch`` and ``combine``."""

    other: float
    attention: float
    experts: float
    dispatch: float
    combine: float

    def __post_init__(self) -> None:
        for name in ("other", "attention", "experts", "dispatch", "combine"):
            require(getattr(self, name) >= 0.0, name, f"seconds must be >= 0, got {getattr(self, name)!r}")

    @property
    def serial_s(self) -> float:
        return self.other + self.attention + self.experts + self.dispatch + self.combine


# SGLang's TBO strategies for DeepSeek MoE layers (python/sglang/srt/operations_strategy.py @02ed4a5e,
# _compute_moe_deepseek_blog_prefill / _decode), as (operations with "|" for a YieldOperation, the
# executor's delta_stages). Prefill: attention, gate, dispatch_a | dispatch_b, experts, combine_a |
# shared experts, combine_b (no yield at the layer's end: it runs on into the next layer's attention).
# Decode: attention prepare | attention core, gate | dispatch_a, shared experts | dispatch_b, experts,
# combine_a | combine_b, output |. The shared experts are priced in ``other`` with the projections.
_STRATEGIES = {
    "prefill": (("other", "attention", "send:dispatch", "|", "wait:dispatch", "experts", "send:combine", "|",
                 "wait:combine"), 0),
    "decode": (("other", "|", "attention", "|", "send:dispatch", "|", "wait:dispatch", "experts", "send:combine", "|",
                "wait:combine", "|"), 2),
}


def _stages(ops: tuple[str, ...], layers: int) -> list[list[str]]:
    """The layers' operations chunked at the yields, as SGLang's _convert_operations_to_stages does."""
    stages, pending = [], []
    for op in ops * layers:
        if op == "|":
            stages.append(pending)
            pending = []
        else:
            pending.append(op)
    return stages + ([pending] if pending else [])


def _order(stages: int, delta: int) -> list[int]:
    """Which micro-batch runs each next stage (SGLang's _execute_two_batch_raw): a runs ``delta`` stages
    ahead, then a and b alternate, then b finishes its last ``delta``."""
    return [0] * delta + [0, 1] * (stages - delta) + [1] * delta


def two_batch_s(parts: LayerParts, *, layers: int, phase: str, sm_share: float = 0.0) -> float:
    """Seconds of ``layers`` MoE layers of two micro-batches, each layer's ``parts``, run as SGLang's
    two-batch overlap runs them: one compute stream taking the stages in the executor's order, the
    exchanges on one stream (the NIC), a dispatch or combine starting when its stage has launched it and
    the stream is free, a wait holding the compute stream until its exchange ends. Compute that runs
    beside an exchange is slowed by the ``sm_share`` of the SMs the exchange kernels hold."""
    require(phase in _STRATEGIES, "phase", f"{phase!r}; choose one of: {', '.join(_STRATEGIES)}")
    require(layers >= 1 and 0.0 <= sm_share < 1.0, "two_batch_overlap", f"needs a layer and an SM share in [0, 1), got {layers}, {sm_share}")
    ops, delta = _STRATEGIES[phase]
    stages = _stages(ops, layers)
    compute_t = exchange_free = 0.0
    busy: list[tuple[float, float]] = []  # the exchange stream's intervals
    ends: list[dict[str, float]] = [{}, {}]
    cursor = [0, 0]
    for batch in _order(len(stages), delta):
        for op in stages[cursor[batch]]:
            kind, _, name = op.partition(":")
            if kind == "send":
                start = max(compute_t, exchange_free)
                exchange_free = start + getattr(parts, name)
                busy = busy[-3:] + [(start, exchange_free)]
                ends[batch][name] = exchange_free
            elif kind == "wait":
                compute_t = max(compute_t, ends[batch][name])
            else:
                seconds = getattr(parts, kind)
                shared = sum(max(0.0, min(compute_t + seconds, e) - max(compute_t, s)) for s, e in busy)
                compute_t += seconds + shared * sm_share / (1.0 - sm_share)
        cursor[batch] += 1
    return max(compute_t, exchange_free)


def overlapped_step_s(parts: LayerParts, *, layers: int, phase: str, mode: str) -> float:
    """A step of two micro-batches with ``parts`` each per MoE layer under two-batch overlap: DeepEP's
    normal kernels hold EP_COMM_SM_SHARE of the SMs while they run, the low-latency ones none in flight."""
    return two_batch_s(parts, layers=layers, phase=phase, sm_share=EP_COMM_SM_SHARE if mode == "normal" else 0.0)
