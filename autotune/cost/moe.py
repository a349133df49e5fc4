"""Mixture-of-experts layers under expert parallelism: the routed experts' time, all-to-all and state.

Layout (Megatron-Core's MoE "parallel folding", Liu et al. 2025, arXiv 2504.14960): attention
uses the stage's tp x cp x dp; the same GPUs form etp x ep x edp for the experts, etp innermost.
Each GPU routes its own tokens (``b s / (tp cp)`` per micro-batch, sequence parallel under TP),
so the expert work of a stage divides by tp x cp whatever ep and etp are; each GPU holds
``E / ep`` experts, each cut ``etp`` ways.

* Low-precision recipes (FP8, MXFP8, NVFP4) cast each grouped GEMM's operands as the dense
  GEMMs' casts are priced (cost/compute.py): memory-bound kernels over the routed rows.
* Grouped GEMMs: each local expert's GEMM is priced by the device's GEMM roofline with M = the
  rows that expert receives (the fit's latency term per expert group: tiles of a small group
  waste most of a wave) and its weights read from HBM, so few tokens per expert turn the
  experts memory-bound (Gale et al. 2023, MegaBlocks sec. 5: grouped GEMM efficiency falls with
  tokens per expert).
* Dispatch and combine: an all-to-all over the EP group of the routed rows, ``tokens x top-k x
  hidden`` bytes per rank each way, forward and backward (Megatron-Core's alltoall dispatcher),
  priced on the levels the EP group crosses (cost/comm.py). DeepEP-style dispatchers send a
  token once per remote node (network_copy_share). Exposed unless the workload turns on
  Megatron's 1F1B all-to-all overlap (cost/moe_stage.py). Each forward first gathers the
  token counts and waits on the host for them (_dispatch_metadata_s).
* The alltoall dispatcher copies the received rows into local-expert order and back
  (_sort_by_expert_s). Experts with biases (GPT-OSS) add the fc2 biases in Python (_expert_bias_s).
* Load imbalance: the busiest EP rank sets the pace; its rows, time and buffers are the mean
  times ``imbalance`` (see :func:`load_imbalance`).
* Expert TP (etp > 1): the rows an EP rank receives are all-gathered over etp before the
  experts and reduce-scattered after (forward and backward), like sequence parallelism.
* State: expert weights, gradients and optimizer states split over ep x etp; their gradients
  are reduced, and ZeRO shards them, over the expert data-parallel group edp (not dp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.compute import op_coefficients, te_saved_input_factor
from autotune.graph.moe_ops import ffn_has_bias
from autotune.graph.table import ModelTables
from autotune.plan.plan import StagePlan
from autotune.spec.workload import GEMM_OPERAND_BYTES, is_training

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a stage of training or of inference
    from autotune.cost.context import CostContext

__all__ = ["ExpertLayerCost", "expert_layer_cost", "load_imbalance", "moe_layer_split", "expert_spans",
           "experts_hit_share", "network_copy_share"]


def moe_layer_split(tables: ModelTables, stage: StagePlan, num_layers=None) -> tuple:
    """(dense layers, MoE layers) of a stage. With ``num_layers`` given (the search scores every
    layer count at once, wherever the stage starts) the model's MoE share is applied to it; a
    plan's own stage counts its layers exactly."""
    if tables.moe_layer is None:
        return (stage.num_layers if num_layers is None else num_layers), 0
    if num_layers is None:
        return tables.layer_counts(*stage.layers)
    share = tables.layer_counts()[1] / tables.model.num_layers
    return num_layers * (1.0 - share), num_layers * share


def _span(ranks: list[int], gpus_per_node: int) -> GroupSpan:
    nodes = {r // gpus_per_node for r in ranks}
    return GroupSpan(len(ranks) // len(nodes), len(nodes))


def expert_spans(stage: StagePlan, gpus_per_node: int, first_gpu: int = 0) -> dict[str, GroupSpan]:
    """Spans of the etp, ep and edp groups holding the stage's first rank, etp innermost
    (Megatron-Core's expert rank order tp-ep-dp)."""
    etp, ep, edp = _expert_spans(stage.etp, stage.ep, stage.edp, gpus_per_node, first_gpu % gpus_per_node)
    return {"etp": etp, "ep": ep, "edp": edp}


@lru_cache(maxsize=1024)  # every MoE stage cost asks; the groups see the first GPU's place in its node only
def _expert_spans(etp: int, ep: int, edp: int, gpus_per_node: int, first_gpu: int) -> tuple[GroupSpan, ...]:
    return (_span([first_gpu + i for i in range(etp)], gpus_per_node),
            _span([first_gpu + i * etp for i in range(ep)], gpus_per_node),
            _span([first_gpu + i * etp * ep for i in range(edp)], gpus_per_node))


def load_imbalance(rows_per_rank, ep: int, override: float = 0.0):
    """Busiest EP rank's routed rows over the mean.

    ``override`` >= 1 is a measured max/mean (a learned router's skew). Otherwise the floor of
    routing without skew (uniform, or Megatron's --moe-router-force-load-balancing): ``ep``
    ranks each send ``r`` rows to uniformly chosen ranks, and the fullest of ``ep`` bins gets
    about ``r + sqrt(2 r ln ep)`` (balls into bins, Raab & Steger 1998, heavily loaded case).
    """
    if override >= 1.0:
        return override + 0.0 * np.asarray(rows_per_rank, dtype=float)
    if ep <= 1:
        return 1.0 + 0.0 * np.asarray(rows_per_rank, dtype=float)
    r = np.maximum(np.asarray(rows_per_rank, dtype=float), 1.0)
    return 1.0 + np.sqrt(2.0 * math.log(ep) / r)


@dataclass(frozen=True, kw_only=True, eq=False)
class ExpertLayerCost:
    """One MoE layer's routed experts on the busiest GPU, per micro-batch (arrays broadcast)."""

    fwd_s: object  # expert kernels, forward
    bwd_s: object  # expert kernels, backward
    comm_s: object  # dispatch + combine all-to-all and expert-TP collectives, forward and backward
    recompute_comm_s: object  # the forward collectives again under full recomputation
    params_per_gpu: float
    saved_bytes: object  # activations the experts keep for backward
    buffer_bytes: object  # dispatch buffers live during the layer
    imbalance: object
    rows_per_expert: object  # routed rows per active local expert (mean, before imbalance)
    active_experts: object  # local experts at least one token is routed to (their weights are read)
    act_fwd_s: object = 0.0  # of fwd_s, the expert activation (recompute module moe_act)
    act_out_bytes: object = 0.0  # the activation's output, the down projection's saved input


def experts_hit_share(tokens, m):
    """Expected share of the experts that ``tokens`` tokens, each picking top-k of E, reach at
    least once: 1 - (1 - k/E)^tokens (each expert is missed by a token with probability 1 - k/E,
    independently across tokens). Decode batches reach few experts and read only their weights."""
    tokens = np.asarray(tokens, dtype=float)
    return 1.0 - (1.0 - m.num_experts_per_token / m.num_experts) ** tokens


def _cast_s(coef, i: int, dtype: str, in_bytes, out_bytes, weight_bytes) -> tuple:
    """(forward, backward) seconds of casting one grouped GEMM's operands to a low-precision
    format, as cost/compute.py's _cast_s prices a dense GEMM (Transformer Engine's fused amax,
    cast and transpose, Micikevicius et al. 2022 sec. 4): the routed rows and the local experts'
    weights before the forward, the output gradient before the backward; one kernel per operand
    for all the groups (TE's grouped linear quantizes the split inputs in one multi-tensor call).
    ``weight_bytes`` is the share of one micro-batch: TE casts the weights on the first
    micro-batch of a step and reuses them (``is_first_microbatch``, te.pytorch module base)
    where the workload says so (TrainingWorkload.reuse_weight_casts)."""
    if dtype not in GEMM_OPERAND_BYTES:
        return 0.0, 0.0
    per_bf16_byte = (2.0 + 2.0 * GEMM_OPERAND_BYTES[dtype]) / 2.0
    fwd = 2 * coef.lat_m[i] + (in_bytes + weight_bytes) * per_bf16_byte * coef.spb[i]
    return fwd, coef.lat_m[i] + out_bytes * per_bf16_byte * coef.spb[i]


# Backward bytes per expert weight for its gradient: Megatron-Core's TEGroupedLinear passes
# fuse_wgrad_accumulation=config.gradient_accumulation_fusion (megatron/core/extensions/
# transformer_engine.py, megatron-core 0.16.1), which NeMo's performance scripts turn on (Megatron-Bridge
# v0.2.0 scripts/performance/utils/helpers.py:125); TE's GroupedLinear backward then accumulates each
# micro-batch's wgrad GEMM into the fp32 main_grad (transformer_engine/pytorch/module/grouped_linear.py,
# accumulate_wgrad_into_param_main_grad): read and write 4 bytes per parameter (8), where a bf16 wgrad
# written once is 2. The first micro-batch of a step may overwrite instead (4 B); the rows accumulate 16-32.
# A run reducing gradients in bf16 (TrainingWorkload.grad_reduce_in_fp32 False) has bf16 main_grad
# buffers (Megatron-Core DDP allocates them in the parameters' dtype): 2 + 2 bytes.
MAIN_GRAD_BYTES_PER_PARAM = 8.0
BF16_MAIN_GRAD_BYTES_PER_PARAM = 4.0


def _expert_kernels_s(tables: ModelTables, device, dtype: str, rows_busy, n_local, etp: int,
                      microbatches=1.0, main_grad_bytes: float = MAIN_GRAD_BYTES_PER_PARAM):
    """(forward, backward) seconds of the expert ops for ``rows_busy`` routed rows on one GPU
    spread over ``n_local`` experts (the local experts reached, possibly fractional on average),
    one of ``microbatches`` micro-batches of a step."""
    t = tables.experts
    coef = op_coefficients(t, device, dtype)
    grad_w = main_grad_bytes / tables.act_bytes  # wgrad traffic per byte of weights
    rows_per_seq = tables.seq_len * tables.model.num_experts_per_token
    fwd = bwd = 0.0
    for i, kind in enumerate(t.kinds):
        scale = rows_busy / rows_per_seq  # sequences' worth of rows on this GPU
        flops, act = t.flops[i] * scale, (t.in_bytes[i] + t.out_bytes[i]) * scale
        if kind == "gemm":  # one group per local expert: roofline with M = its rows
            w = t.weight_bytes[i] / (tables.model.num_experts * etp)
            f_e, a_e = flops / n_local, act / n_local
            fwd = fwd + n_local * np.maximum(coef.lat_c[i] + f_e * coef.spf[i], coef.lat_m[i] + (a_e + w) * coef.spb[i])
            bwd = bwd + n_local * np.maximum(2 * coef.lat_c[i] + 2 * f_e * coef.spf[i],
                                             2 * coef.lat_m[i] + (a_e * t.bwd_bytes_factor[i] + w + grad_w * w)
                                             * coef.spb[i])
            cast_fwd, cast_bwd = _cast_s(coef, i, dtype, t.in_bytes[i] * scale, t.out_bytes[i] * scale,
                                         n_local * w / microbatches)
            fwd, bwd = fwd + cast_fwd, bwd + cast_bwd
        else:  # the activation over all local rows, one kernel each way
            fwd = fwd + coef.lat_m[i] + act * coef.spb[i]
            bwd = bwd + coef.lat_m[i] + act * t.bwd_bytes_factor[i] * coef.spb[i]
    return fwd, bwd


def _expert_act(tables: ModelTables, device, dtype: str, rows_busy) -> tuple:
    """(forward seconds, output bytes) of the expert activation over ``rows_busy`` rows, as
    _expert_kernels_s prices it (zero without an activation)."""
    t = tables.experts
    if "expert_act" not in t.names:
        return 0.0, 0.0
    i = t.names.index("expert_act")
    scale = rows_busy / (tables.seq_len * tables.model.num_experts_per_token)
    coef = op_coefficients(t, device, dtype)
    return coef.lat_m[i] + (t.in_bytes[i] + t.out_bytes[i]) * scale * coef.spb[i], t.out_bytes[i] * scale


_COUNT_BYTES = 8.0  # int64 tokens-per-expert counts (token_dispatcher.py: routing_map.sum(dim=0).long())


def _dispatch_metadata_s(ctx: CostContext, stage: StagePlan, spans: dict) -> float:
    """Forward-only cost of Megatron-Core's alltoall dispatcher learning the split sizes each MoE
    layer (megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher.preprocess):
    the E token counts all-gathered over the EP group, copied to the host, and a host wait
    (``d2h_event.synchronize()`` at ``before_ep_alltoall``) before the all-to-all can be issued.
    The wait empties the GPU's queue, so at least one kernel launch is exposed after it: priced
    as the device's measured fixed cost of a small kernel (its memory regression's latency).
    A lower bound: host (Python) time between the wait and the next launch is not modelled."""
    if stage.ep * stage.etp <= 1:
        return 0.0
    counts = collective_time_s("all_gather", ctx.tables.model.num_experts * _COUNT_BYTES * stage.ep,
                               spans["ep"], ctx.cluster)
    return counts + ctx.cluster.device.memory.latency_s


def network_copy_share(m, span: GroupSpan, dispatcher: str) -> float:
    """Network bytes of a node-deduplicating dispatch over those of the plain all-to-all.

    NCCL's all-to-all sends a token once per chosen expert, ``k (nodes - 1) / nodes`` copies
    off the node on average. DeepEP's internode kernels (and HybridEP) send it once per remote
    node that holds one of its experts and fan it out over NVLink there (DeepSeek-V3 report,
    arXiv 2412.19437 sec. 3.2.2): with the ``E`` experts split evenly over the nodes and the k
    choices uniform without repetition (force-balanced routing), a node is missed with
    probability prod_j (E - E/nodes - j) / (E - j). Group-limited routing (DeepSeek's topk_group)
    would lower it further; not modelled."""
    nodes = span.n_inter
    if dispatcher != "deepep" or nodes <= 1:
        return 1.0
    n, k = m.num_experts, m.num_experts_per_token
    missed = float(np.prod([(n - n / nodes - j) / (n - j) for j in range(k)]))
    return (nodes - 1) * (1.0 - missed) / (k * (nodes - 1) / nodes)


def _comm_s(ctx: CostContext, stage: StagePlan, spans: dict, rows_busy) -> tuple:
    """(all collectives of one layer fwd+bwd, the forward ones) in seconds."""
    m, e = ctx.tables.model, ctx.tables.act_bytes
    nbytes = rows_busy * m.hidden_size * e  # the routed rows a rank sends (and, busiest, receives)
    # a deduplicating dispatcher's network bytes (the all-to-all's cross-node term dominates)
    nbytes = nbytes * network_copy_share(m, spans["ep"], ctx.runtime.ep_dispatcher)
    a2a = collective_time_s("all_to_all", nbytes, spans["ep"], ctx.cluster)
    fwd = 2 * a2a  # dispatch and combine
    if stage.etp > 1:
        gathered = nbytes * stage.etp
        fwd = fwd + collective_time_s("all_gather", gathered, spans["etp"], ctx.cluster) \
            + collective_time_s("reduce_scatter", gathered, spans["etp"], ctx.cluster)
    metadata = _dispatch_metadata_s(ctx, stage, spans)  # forward only: backward reuses the splits
    return 2 * fwd + metadata, fwd + metadata


def _sort_by_expert_s(ctx: CostContext, stage: StagePlan, rows_busy, n_local) -> tuple:
    """(forward, backward) seconds of the alltoall dispatcher's second permutation: the rows a
    rank receives arrive grouped by source rank and are copied into local-expert order after
    the dispatch and back before the combine, when it holds more than one expert
    (megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher
    dispatch_postprocess / combine_preprocess, sort_chunks_by_idxs); the backward does the
    inverse copies. DeepEP/HybridEP (flex dispatcher) permute once, on the receiving side.
    Without expert parallelism too: the copies depend only on the local expert count
    (``num_local_experts > 1``), as profilers/moe_traffic.py measured at ep 1
    (docs/measurements/moe_traffic_2026-11-25.json: the two row copies, 131 KB per token each way).
    Training only: serving engines run their own fused MoE dispatch."""
    if not is_training(ctx.workload) or ctx.runtime.ep_dispatcher != "alltoall":
        return 0.0, 0.0
    device = ctx.cluster.device
    fit = device.memory_regression("stream")
    rows = rows_busy * stage.etp  # the rows after the expert-TP gather
    copy = (fit.latency_s + 2.0 * rows * ctx.tables.model.hidden_size * ctx.tables.act_bytes
            * fit.seconds_per_unit) / device.kernel_efficiency
    copies = np.where(np.asarray(n_local) > 1.0, 2.0, 0.0)  # sort after dispatch, unsort before combine
    return copies * copy, copies * copy


# Transformer Engine's low-precision recipes whose grouped GEMMs need each expert's rows padded to a
# multiple of 16 (FP8) or 32 (MXFP8/NVFP4): TEGroupedMLP copies its input into the padded layout and
# the output back (Fp8Padding / Fp8Unpadding). torchtitan's float8 rowwise pads inside its permutation.
TE_PADDED_DTYPES = frozenset({"fp8", "mxfp8", "nvfp4"})


def _quantization_padding_s(ctx: CostContext, rows_busy) -> tuple:
    """(forward, backward) seconds of the copies Megatron-Core's TEGroupedMLP makes around the experts
    under an FP8/MXFP8/NVFP4 recipe (megatron/core/transformer/moe/experts.py TEGroupedMLP.forward:
    quantization_padding of the routed rows before linear_fc1, quantization_unpadding of linear_fc2's
    output; Transformer Engine fp8_padding.py / fp8_unpadding.py, tex.fused_multi_row_padding). TE skips
    them only when every local expert's row count is already aligned, which balanced routing's
    random counts almost never are; the tables' NeMo performance scripts (Megatron-Bridge v0.1.0rc4,
    v0.2.0 scripts/performance) never set moe_router_padding_for_fp8 (default off). Each is a
    memory-bound copy of the rows (read and write); the backward runs the inverse copies of the
    gradients. Each memory-bound copy as _sort_by_expert_s prices it."""
    if not is_training(ctx.workload) or ctx.workload.dtype not in TE_PADDED_DTYPES:
        return 0.0, 0.0
    device = ctx.cluster.device
    fit = device.memory_regression("stream")
    copy = (fit.latency_s + 2.0 * rows_busy * ctx.tables.model.hidden_size * ctx.tables.act_bytes
            * fit.seconds_per_unit) / device.kernel_efficiency
    return 2.0 * copy, 2.0 * copy


# Megatron-Core 0.16.1 TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py): the experts' fc2
# biases added in Python, per local expert ``t + b * p`` (bf16 rows, bf16 bias, fp32 probabilities), then
# torch.cat and .to(bf16). Measured by profilers/moe_bias_traffic.py on GPT-OSS's hidden 2880
# (docs/measurements/moe_bias_traffic_2026-11-25.json): bytes read + written per element of the fc2 output,
# and kernels (per local expert, and fixed), forward and backward.
EXPERT_BIAS_BYTES_PER_ELEMENT = {"fwd": 28.0, "bwd": 40.0}  # fwd: mul 4, add 10, cat 8, cast 6
EXPERT_BIAS_KERNELS = {"fwd": (2.0, 2.0), "bwd": (6.0, 3.0)}  # (per local expert, fixed)


def _expert_bias_s(ctx: CostContext, rows, n_local) -> tuple:
    """(forward, backward) seconds of adding the routed experts' output biases, when the model's FFNs have
    biases (GPT-OSS): Transformer Engine's GroupedLinear adds linear_fc1's bias in its GEMM, but linear_fc2
    returns its biases (``skip_bias_add=True``) and TEGroupedMLP._apply_bias adds them, weighted by the
    fp32 routing probabilities, in a Python loop over the local experts (two kernels each, plus the
    concatenation and the cast back to bf16); its backward (six kernels per expert: the probabilities'
    and the biases' gradients are reductions) moves the measured bytes. ``rows``: the routed rows on this
    GPU (after the expert-TP gather). Memory-bound, each kernel as _sort_by_expert_s prices a copy.
    Training only: serving engines fuse the bias into their MoE kernels."""
    if not is_training(ctx.workload) or not ffn_has_bias(ctx.tables.model):
        return 0.0, 0.0
    device = ctx.cluster.device
    fit = device.memory_regression("stream")
    elements = rows * ctx.tables.model.hidden_size
    out = []
    for p in ("fwd", "bwd"):
        per_expert, fixed = EXPERT_BIAS_KERNELS[p]
        kernels = per_expert * np.asarray(n_local, dtype=float) + fixed
        out.append((kernels * fit.latency_s + elements * EXPERT_BIAS_BYTES_PER_ELEMENT[p] * fit.seconds_per_unit)
                   / device.kernel_efficiency)
    return out[0], out[1]


def expert_layer_cost(ctx: CostContext, stage: StagePlan, first_gpu: int = 0) -> ExpertLayerCost:
    """The routed experts of one MoE layer for ``ctx`` (a StageContext or InferenceContext-like
    object with tables, cluster, workload and micro_batch)."""
    tables = ctx.tables
    m = tables.model
    spans = expert_spans(stage, ctx.cluster.gpus_per_node, first_gpu)
    rows = np.asarray(ctx.micro_batch, dtype=float) * tables.seq_len * m.num_experts_per_token / (stage.tp * stage.cp)
    imbalance = load_imbalance(rows, stage.ep, ctx.workload.expert_load_imbalance)
    rows_busy = rows * imbalance
    # distinct tokens that can reach this GPU's experts: its EP group's, gathered over etp
    tokens = rows / m.num_experts_per_token * stage.ep * stage.etp
    n_active = m.num_experts // stage.ep * experts_hit_share(tokens, m)
    casts_per_step = np.maximum(np.asarray(ctx.num_microbatches, dtype=float), 1.0) \
        if ctx.runtime.reuse_weight_casts else 1.0
    main_grad = MAIN_GRAD_BYTES_PER_PARAM if ctx.runtime.grad_reduce_in_fp32 \
        else BF16_MAIN_GRAD_BYTES_PER_PARAM
    fwd, bwd = _expert_kernels_s(tables, ctx.cluster.device, ctx.workload.dtype, rows_busy, n_active, stage.etp,
                                 casts_per_step, main_grad)
    sort_fwd, sort_bwd = _sort_by_expert_s(ctx, stage, rows_busy, n_active)
    pad_fwd, pad_bwd = _quantization_padding_s(ctx, rows_busy * stage.etp)
    bias_fwd, bias_bwd = _expert_bias_s(ctx, rows_busy * stage.etp, n_active)
    fwd, bwd = fwd + sort_fwd + pad_fwd + bias_fwd, bwd + sort_bwd + pad_bwd + bias_bwd
    comm, fwd_comm = _comm_s(ctx, stage, spans, rows_busy)
    act_fwd, act_out = _expert_act(tables, ctx.cluster.device, ctx.workload.dtype, rows_busy)
    scale = rows_busy / (tables.seq_len * m.num_experts_per_token)
    saved = float(_expert_saved_bytes(tables, ctx.workload.dtype, ctx.runtime.fp8_recipe)) * scale
    # send and receive buffers of the permuted rows, and the etp-gathered rows
    buffers = rows_busy * m.hidden_size * tables.act_bytes * (2.0 + (stage.etp if stage.etp > 1 else 0.0))
    return ExpertLayerCost(
        fwd_s=_plain(fwd), bwd_s=_plain(bwd), comm_s=_plain(comm), recompute_comm_s=_plain(fwd_comm),
        params_per_gpu=float(tables.experts.params.sum()) / (stage.ep * stage.etp),
        saved_bytes=_plain(saved), buffer_bytes=_plain(buffers), imbalance=_plain(imbalance),
        rows_per_expert=_plain(rows * stage.etp / n_active), active_experts=_plain(n_active),
        act_fwd_s=_plain(act_fwd), act_out_bytes=_plain(act_out))


def _expert_saved_bytes(tables: ModelTables, dtype: str, fp8_recipe: str) -> float:
    """Bytes the routed experts keep for backward per sequence's routed rows: Transformer Engine's
    grouped linears keep their inputs quantized under its recipes (cost/compute.py te_saved_input_factor)."""
    t = tables.experts
    if dtype in GEMM_OPERAND_BYTES and fp8_recipe != "cast":
        return float((t.saved_bytes * te_saved_input_factor(t, dtype)).sum())
    return float(t.saved_bytes.sum())


def _plain(x):
    x = np.asarray(x, dtype=float)
    return float(x) if x.ndim == 0 else x
