"""The MoE layer's routed experts in a serving step (cost/serving_step.py): their grouped GEMMs over the
experts a step's tokens reach, split over expert-parallel groups, the row moves around them, and the
layer's other operators beside them; the device fits the experts take (serving_cluster's expert classes)."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from autotune.cost.checkpoint_layout import bf16_attention, bf16_attention_gemms
from autotune.cost.expert_map import masked_rows_s
from autotune.cost.expert_tiles import expert_row_share
from autotune.cost.moe_skew import busiest_rank_skew, routing_alpha
from autotune.cost.serving_ops import STORED_BYTES, not_attention, ops_s, select_ops
from autotune.graph.table import OpTable
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

if TYPE_CHECKING:  # serving_step imports this module
    from autotune.cost.serving_step import ReplicaShape

__all__ = ["EXPERT_GEMM_CLASS", "W4A16_CEILING_CLASS", "W4A16_STREAM_CLASS", "expert_device", "experts_s", "full_hidden", "has_gemm_fit",
           "non_expert_s", "pads_experts", "routed_moves", "routing_in_kernel"]

# The device fit classes the routed experts take (serving_gemm_fits.serving_cluster fills them): an engine's
# measured MoE grouped GEMMs, and a weight-only 4-bit MoE kernel's ceiling on their FLOPs and, where it streams
# the weights slower than the memory fit (converting them on the way in), on their bytes
EXPERT_GEMM_CLASS, W4A16_CEILING_CLASS, W4A16_STREAM_CLASS = "expert_gemm", "expert_gemm_w4a16", "expert_w4a16_stream"


def routing_in_kernel(moe_layer: OpTable) -> OpTable:
    """The MoE layer without its top-k kernel: the TRTLLM-Gen fused MoE takes the router's logits and
    routes inside (FlashInfer trtllm_fp4_block_scale_moe(routing_logits, routing_bias, ...): sigmoid,
    correction bias, group-limited top-k and renormalization in its routing kernel; TensorRT-LLM's
    TRTLLMGenFusedMoE passes router_logits the same way), and its measured fit times the module from
    the logits (aiconfigurator @095f58a5 collector/sglang/collect_moe.py: TopK then the MoE layer)."""
    return select_ops(moe_layer, np.array([n != "router_topk" for n in moe_layer.names]))


def pads_experts(weight_dtype: str, device, mxfp4_pad: tuple) -> bool:
    """Whether the engine's weight-only MXFP4 kernel pads the experts: MXFP4 weights on a GPU without
    FP4 tensor cores (serving_gemm_fits.gemm_rate_dtype's test) where the engine states a padding."""
    return bool(mxfp4_pad) and weight_dtype == "mxfp4" and not has_gemm_fit(device, "nvfp4")


# The MoE layer's row moves (graph/moe_ops.py): permute writes each token once per expert it routes to,
# unpermute reads those rows back and sums them. They run on the rows the rank's experts take.
ROUTED_MOVES = ("permute", "unpermute")


def routed_moves(table: OpTable) -> np.ndarray:
    return np.array([n in ROUTED_MOVES for n in table.names])


def full_hidden(experts: OpTable, moves: OpTable) -> tuple[OpTable, OpTable]:
    """The routed experts' tables as a TP-split expert runs them: every rank of an expert's TP group
    takes its routed rows whole (the up GEMM's input, the permuted rows, at the full hidden size) and
    writes the down GEMM's partial sums at the full hidden size, which unpermute reads back; only the
    intermediate width splits (vLLM's FusedMoE: intermediate_size_per_partition = intermediate_size //
    tp_size, hidden_size whole, model_executor/layers/fused_moe/layer.py; TensorRT-LLM's fused MoE the
    same by moe_tp_size, as aiconfigurator's collector keys its shapes: inter_size // moe_tp_size,
    collector/trtllm/collect_moe.py @095f58a5). Its measured TP-split layer (moe_tp 8, h100_sxm
    moe_perf.parquet there) runs 2-3x the time of the split-everything pricing at 1k-4k tokens."""
    up_in = np.array([n == "expert_up" for n in experts.names])
    down_out = np.array([n == "expert_down" for n in experts.names])
    experts = replace(experts, in_split=experts.in_split & ~up_in, out_split=experts.out_split & ~down_out)
    none = np.zeros(len(moves.names), dtype=bool)
    return experts, replace(moves, in_split=none, out_split=none)


def non_expert_s(layer: OpTable, model: ModelSpec, device, dtype: str, rate_dtype: str, tokens: np.ndarray,
                  tp: int) -> np.ndarray:
    """The operators of a layer but attention and the routed experts (their permute and unpermute
    with them, experts_s), attention projections in BF16 where the checkpoint keeps them so
    (cost/checkpoint_layout.py)."""
    table = select_ops(layer, not_attention(layer) & ~routed_moves(layer))
    if not bf16_attention(model, dtype):
        return ops_s(table, device, dtype, rate_dtype, tokens, tp)
    attention = bf16_attention_gemms(model, table)
    return (ops_s(select_ops(table, attention), device, "bf16", "bf16", tokens, tp)
            + ops_s(select_ops(table, ~attention), device, dtype, rate_dtype, tokens, tp))


def has_gemm_fit(device, dtype: str) -> bool:
    try:
        device.regression("gemm", dtype)
    except Exception:  # noqa: BLE001 - a profile without that format's fit
        return False
    return True


def experts_s(experts: OpTable, moves: OpTable, model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape,
               weight_dtype: str, rate_dtype: str, tokens: np.ndarray, moe_backend: str = "",
               masked_rows: bool = False) -> np.ndarray:
    """The routed experts of one MoE layer for each token count: their grouped GEMMs reading the
    weights of the experts the tokens reach (uniform routing: E (1 - (1 - k/E)^n) of E) and computing
    every expert's rows rounded up to the kernel's tile (cost/expert_tiles.py; a weight-only 4-bit kernel's
    fit, where the device has one, bounds their unpadded FLOPs and its weight stream their bytes), split over ep
    groups of tp / ep GPUs, and the permutes around them; their exchange is moe_exchange_s's. With
    ep > 1 the step waits for the busiest EP group, which takes the skewed routing's share of the
    rows (cost/moe_skew.py); expert TP (ep = 1) splits every expert, so every rank takes them all, each
    expert's rows padded to the tile under the skewed loads (cost/expert_loads.py).
    ``masked_rows``: EP inside the TP group runs the elementwise work on every routed row (expert_map.py)."""
    e, k = model.num_experts, model.num_experts_per_token
    reached = 1.0 - (1.0 - k / e) ** tokens
    # each EP group holds E / ep experts, each split over tp / ep GPUs: W / tp a GPU, and takes the
    # rows routed to its experts (n k / ep under balanced routing, times the skew on the busiest),
    # permuted and unpermuted whole; its experts' rows are as many times their mean, so pad as those
    busiest = tokens * busiest_rank_skew(model, shape.ep, tokens, eplb=shape.eplb)
    # expert TP computes every expert's rows, padded to the tile under the skewed loads (expert_loads.py)
    alpha = routing_alpha(model) if shape.ep == 1 else 0.0
    padded = expert_row_share(busiest, e, k, rate_dtype, moe_backend, alpha)
    experts, moves = full_hidden(replace(experts, weight_bytes=experts.weight_bytes / shape.ep), moves)
    time = ops_s(experts, expert_device(cluster.device), weight_dtype, rate_dtype, busiest / shape.ep,
                  shape.tp // shape.ep, reached, padded)
    ceiling = cluster.device.compute.get((W4A16_CEILING_CLASS, rate_dtype))
    if ceiling is not None and weight_dtype in STORED_BYTES:  # 4-bit weights run weight-only at this rate
        stream = cluster.device.compute.get((W4A16_STREAM_CLASS, rate_dtype), cluster.device.memory)
        device = cluster.device.with_changes(compute={**cluster.device.compute, ("gemm", rate_dtype): ceiling}, memory=stream)
        time = np.maximum(time, ops_s(experts, device, weight_dtype, rate_dtype, busiest / shape.ep,
                                      shape.tp // shape.ep, reached))
    time = time + ops_s(moves, cluster.device, weight_dtype, rate_dtype, busiest / shape.ep, 1)
    if masked_rows and shape.ep > 1 and not shape.attention_dp:
        time = time + masked_rows_s(experts, moves, expert_device(cluster.device), cluster.device, weight_dtype,
                                    rate_dtype, tokens, busiest / shape.ep, shape.tp // shape.ep, model.hidden_size, k)
    return time


@lru_cache(maxsize=64)
def expert_device(device):
    """``device`` with its expert grouped-GEMM fits (serving_cluster's) as its GEMM fits."""
    experts = {("gemm", dtype): fit for (op_class, dtype), fit in device.compute.items() if op_class == EXPERT_GEMM_CLASS}
    return device.with_changes(compute={**device.compute, **experts}) if experts else device
