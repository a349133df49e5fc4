"""Collectives of one serving step on one replica: TP all-reduces per layer, the MoE layer's token
exchange under DP attention, the sends between pipeline stages (cost/serving_step.py adds them to its
per-token table). NCCL's measured all-reduce, all-gather and reduce-scatter inside one node where the cluster has a
table (cost/serving_nccl.py), the alpha-beta time per device-mesh level from cost/comm.py else."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.cost.comm import collective_time_s, level_time_s
from autotune.cost.mesh import group_spans
from autotune.cost.serving_a2a import trtllm_alltoall_s
from autotune.cost.serving_custom_ar import VLLM_SYMM, sglang_all_reduce_s, vllm_all_reduce_s
from autotune.cost.serving_nccl import serving_nccl_all_reduce_s, serving_nccl_s
from autotune.cost.serving_ops import ACT_BYTES
from autotune.errors import require
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

if TYPE_CHECKING:  # serving_step imports this module
    from autotune.cost.serving_step import ReplicaShape

__all__ = ["layer_collectives_s", "moe_exchange_s", "adp_gather_bytes", "moe_comm_dtype", "prefill_exchange_extra_s",
           "ADP_ALL_REDUCE", "stage_sends_s", "tp_all_reduce_s", "engine_tp_allreduce", "TRTLLM_ALL_REDUCE",
           "CUSTOM_AR_ENGINES"]


def layer_collectives_s(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, span, tokens: np.ndarray,
                         dense: int, moe: int, tp_allreduce: str = "nccl") -> np.ndarray:
    """Per-step collectives of all layers: two all-reduces of the activations per layer under TP
    (Megatron's layout; with EP too, the tokens are already on every rank and the layer's all-reduce
    sums the experts' partial outputs); under DP attention none around attention, and the MoE layer
    gathers every rank's tokens before its experts and reduce-scatters their outputs after, whether
    the experts are TP-split or EP-split, or dispatches by all-to-all (moe_exchange_s).
    TensorRT-LLM's CutlassFusedMoE and WideEPMoE take the all-to-all only where MnnvlMemory.supports_mnnvl()
    (a multi-node NVLink domain, GB200 NVL) and moe_ep_size > top_k, else allgather + reducescatter
    (_torch/modules/fused_moe/fused_moe_cutlass.py select_alltoall_method_type, stored 1.x revisions);
    SGLang's DP attention gathers and scatters the same way without DeepEP (dp_attention.py dp_gather).
    The gather moves adp_gather_bytes a token (TensorRT-LLM's quantized rows: ``shape.moe_comm_dtype``).
    ``tp_allreduce`` "trtllm_auto": the all-reduces as TensorRT-LLM's AUTO strategy runs them, "custom_ar" as
    vLLM's and SGLang's (tp_all_reduce_s)."""
    act = tokens * model.hidden_size * ACT_BYTES
    if not shape.attention_dp:
        return model.num_layers * (2.0 * tp_all_reduce_s(act, tokens, span, cluster, tp_allreduce) + _qk_norm_sums_s(
            model, cluster, span, tokens))
    require(moe > 0, "attention_dp", "DP attention is for mixture-of-experts models")
    return moe * moe_exchange_s(model, cluster, shape, span, tokens, tp_allreduce)


# TensorRT-LLM's AUTO all-reduce (cpp/tensorrt_llm/thop/allreduceOp.cpp selectImplementation @4bb1ef88800b):
# NCCL where the input outgrows the IPC workspace (customAllReduceUtils.h getMaxRequiredWorkspaceSize: 16e6
# bytes for 2 ranks, 8e6 above) or the group leaves the node (no P2P); else its MIN_LATENCY Lamport kernels
# for 2 ranks, and above 2 ranks up to 128 tokens ("NCCL is faster than MIN_LATENCY when the token number is
# greater than 256. I conservatively set the threshold here to 128 tokens"), NCCL beyond.
_TRTLLM_WORKSPACE_BYTES = {2: 16e6}
_TRTLLM_WORKSPACE_BYTES_ABOVE_2 = 8e6
_TRTLLM_MIN_LATENCY_MAX_TOKENS = 128
TRTLLM_ALL_REDUCE = "trtllm_all_reduce"  # the measured kernel's key in LinkLevel.collectives (clusters.toml)


# vLLM's and SGLang's own all-reduce (CustomAllreduce: one-/two-shot over IPC buffers) takes an input under its
# 8 MiB buffer inside one node on 2, 4, 6 or 8 GPUs, NCCL the rest (vllm-project/vllm @0ad80649
# vllm/distributed/device_communicators/custom_all_reduce.py max_size=8192 * 1024, the cap while symmetric
# memory is off; sgl-project/sglang @004e6561 python/sglang/srt/distributed/device_communicators/custom_all_reduce.py
# _MAX_CAR_SIZE, should_custom_ar: inp_size < max_size)
CUSTOM_AR_ENGINES = ("vllm", "sglang")
_CUSTOM_AR_MAX_BYTES = 8192 * 1024
_CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)


def engine_tp_allreduce(engine: str, tp_allreduce: str) -> str:
    """The all-reduce kernels tp_all_reduce_s prices for a serving engine: "custom_ar" for vLLM and SGLang,
    whose own kernel takes the small inputs and NCCL the large; the engine's ``tp_allreduce`` else."""
    return "custom_ar" if engine in CUSTOM_AR_ENGINES and tp_allreduce == "nccl" else tp_allreduce


def tp_all_reduce_s(act: np.ndarray, tokens: np.ndarray, span, cluster: ClusterSpec, tp_allreduce: str) -> np.ndarray:
    """One TP all-reduce of ``act`` bytes (``tokens`` rows) for each token count: NCCL's (its measured table
    where the cluster has one, cost/serving_nccl.py; comm.py's formula else); under "custom_ar" (vLLM, SGLang)
    comm.py's formula where their own kernel takes the input (not measured here: priced as before), NCCL's
    above; under "trtllm_auto" TensorRT-LLM's Lamport kernel where its AUTO rule picks it and the cluster's
    NVLink level has it measured for this group size (intra_node.collectives.trtllm_all_reduce.<n>), NCCL else;
    under "sglang_v1" / "sglang_v2" (optionally + the FlashInfer fusion) SGLang's kernels at their measured
    tables (cost/serving_custom_ar.py sglang_all_reduce_s); under "vllm_symm" vLLM 0.11-0.14's measured sweep
    where the cluster has one, "custom_ar"'s pricing else."""
    nccl = serving_nccl_all_reduce_s(act, span, cluster)
    n = span.size
    if tp_allreduce.startswith("sglang"):  # SGLang's own dispatch as its release runs it (serving_custom_ar.py)
        return sglang_all_reduce_s(act, tokens, span, cluster, tp_allreduce, nccl)
    measured = vllm_all_reduce_s(act, span, cluster, nccl) if tp_allreduce == VLLM_SYMM else None
    if measured is not None:  # vLLM 0.11-0.14's dispatch as measured (serving_custom_ar.py)
        return measured
    if tp_allreduce in ("custom_ar", VLLM_SYMM):
        if span.n_inter > 1 or n not in _CUSTOM_AR_WORLD_SIZES:
            return nccl
        return np.where(act < _CUSTOM_AR_MAX_BYTES, collective_time_s("all_reduce", act, span, cluster), nccl)
    fit = cluster.intra_node.collectives.get((TRTLLM_ALL_REDUCE, n))
    if tp_allreduce != "trtllm_auto" or fit is None or span.n_inter > 1:
        return nccl
    workspace = _TRTLLM_WORKSPACE_BYTES.get(n, _TRTLLM_WORKSPACE_BYTES_ABOVE_2)
    lamport = (act <= workspace) & ((n <= 2) | (tokens <= _TRTLLM_MIN_LATENCY_MAX_TOKENS)) & (act > 0)
    return np.where(lamport, fit.latency_s + act * fit.seconds_per_unit, nccl)


def _qk_norm_sums_s(model: ModelSpec, cluster: ClusterSpec, span, tokens: np.ndarray) -> np.ndarray:
    """An RMSNorm over the whole query and key projections (qk_norm "full": MiniMax-M2, OLMoE) needs
    each token's sums of squares from every TP rank: one more all-reduce per layer, of two FP32 sums
    per token (SGLang's MiniMaxM2RMSNormTP, models/minimax_m2.py: local sum_sq, all-reduced over the
    attention TP group, fused for q and k; vLLM's MiniMaxM2RMSNormTP all-reduces q's and k's variance
    separately, two of these, priced as one; vLLM's OLMoE all-gathers q and k whole, more bytes, so this
    is its lower bound). Per-head norms (Qwen3, GLM-4.5) stay on their rank."""
    if model.qk_norm != "full":
        return 0.0 * tokens
    return collective_time_s("all_reduce", tokens * 2 * 4, span, cluster)


def stage_sends_s(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, tokens: np.ndarray) -> np.ndarray:
    """The pp - 1 point-to-point sends of a micro-batch's activations between consecutive stages:
    over NVLink inside a node, over the network where a stage boundary is a node boundary."""
    if shape.pp == 1:
        return 0.0 * tokens
    stages_per_node = max(1, cluster.gpus_per_node // shape.tp)
    inter = -(-shape.pp // stages_per_node) - 1
    act = tokens * model.hidden_size * ACT_BYTES
    return ((shape.pp - 1 - inter) * level_time_s("send_recv", act, 2, cluster.intra_node)
            + inter * level_time_s("send_recv", act, 2, cluster.inter_node))


def moe_exchange_s(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, span, tokens: np.ndarray,
                   tp_allreduce: str = "custom_ar") -> np.ndarray:
    """One MoE layer's token exchange under DP attention for each token count (layer_collectives_s says
    which): the all-to-all dispatch of each rank's share of the tokens' k copies and their combine
    where the engine runs one (ReplicaShape.moe_alltoall), else every rank's tokens gathered before the
    experts and their outputs reduce-scattered after, or SGLang's SUM_LEN all-reduces by the engine's
    ``tp_allreduce`` kernels; none without DP attention (TP's all-reduces)."""
    if not shape.attention_dp:
        return 0.0 * tokens
    if shape.adp_all_reduce == "always":
        return _sum_len_exchange_s(model, cluster, span, tokens, tp_allreduce)
    if shape.moe_alltoall:
        ep_span = group_spans("tp-cp-dp", shape.ep, 1, 1, cluster.gpus_per_node)["tp"]
        sent = tokens / shape.tp * model.num_experts_per_token * model.hidden_size * ACT_BYTES
        formula = 2.0 * collective_time_s("all_to_all", sent, ep_span, cluster)
        measured = trtllm_alltoall_s(model, cluster, ep=shape.ep, comm_dtype=shape.moe_comm_dtype,
                                     tokens_per_rank=tokens / shape.tp)
        return formula if measured is None else np.where(np.isnan(measured), formula, measured)
    gathered = tokens * adp_gather_bytes(model, shape.moe_comm_dtype)
    act = tokens * model.hidden_size * ACT_BYTES
    return serving_nccl_s("all_gather", gathered, span, cluster) + serving_nccl_s("reduce_scatter", act, span, cluster)


# SGLang's DP attention without DeepEP pads each step's rows either to the sum of the ranks' tokens and gathers by an
# all-reduce of a zeroed buffer, the experts' output all-reduced after and each rank keeping its rows (SUM_LEN), or to
# the busiest rank's count x ranks, all_gather_into_tensor before and reduce_scatter_tensor after (MAX_LEN)
# (sgl-project/sglang @00161092 python/sglang/srt/layers/dp_attention.py DpPaddingMode.get_dp_padding_mode,
# _dp_gather_via_all_reduce, _dp_gather_via_all_gather). MAX_LEN came with PRs #8278 / #8539 (July 2025, after
# the 0.4 line's preset): 0.4 runs SUM_LEN always; later releases SUM_LEN for a batch with prompts (extend) on more
# than one rank and MAX_LEN for decode batches when sum * 2 >= max * ranks (the simulator spreads decodes evenly).
ADP_ALL_REDUCE = ("", "prefill", "always")


def _sum_len_exchange_s(model: ModelSpec, cluster: ClusterSpec, span, tokens: np.ndarray, tp_allreduce: str) -> np.ndarray:
    """SGLang's SUM_LEN exchange of one MoE layer: two all-reduces of every rank's rows by the engine's TP
    all-reduce kernels (tp_all_reduce_s: its own below their size cap in a node, NCCL above)."""
    act = tokens * model.hidden_size * ACT_BYTES
    return 2.0 * tp_all_reduce_s(act, tokens, span, cluster, tp_allreduce)


def prefill_exchange_extra_s(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, span,
                             tokens: np.ndarray, tp_allreduce: str = "custom_ar") -> np.ndarray | None:
    """What one MoE layer's exchange costs beyond moe_exchange_s's in a step with prompt tokens: SGLang's SUM_LEN
    all-reduces in place of MAX_LEN's gather and reduce-scatter where it switches by batch (``adp_all_reduce``
    "prefill"); None elsewhere."""
    if not shape.attention_dp or shape.adp_all_reduce != "prefill":
        return None
    extra = (_sum_len_exchange_s(model, cluster, span, tokens, tp_allreduce)
             - moe_exchange_s(model, cluster, shape, span, tokens, tp_allreduce))
    extra[0] = 0.0
    return extra


# TensorRT-LLM gathers the MoE input after quantizing it, with each token's top-k expert ids (int32) and routing
# weights (fp32); the output comes back in BF16 by reduce-scatter (NVIDIA/TensorRT-LLM @000a01de
# tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py forward_chunk: run_post_quant_allgather). NVFP4: two
# values a byte and one FP8 scale per 16 (scaling_vector_size); per-tensor FP8 (fp8_qdq): one byte; block-scaled
# FP8 (DeepSeek's) and unquantized inputs stay BF16.
_ROUTING_BYTES_PER_EXPERT = 4 + 4
_COMM_BYTES_PER_ELEMENT = {"bf16": ACT_BYTES, "fp8": 1.0, "nvfp4": 0.5 + 1.0 / 16}
_POST_QUANT_ENGINES = ("tensorrt-llm", "mlperf-nvidia")


def moe_comm_dtype(model: ModelSpec, engine: str, weight_dtype: str) -> str:
    """The format TensorRT-LLM (and the MLPerf harness, which runs it) quantizes the MoE input to before the
    attention-DP exchange; "" for the engines that exchange the BF16 hidden state as it is."""
    if engine not in _POST_QUANT_ENGINES:
        return ""
    if weight_dtype == "nvfp4":
        return "nvfp4"
    return "fp8" if weight_dtype == "fp8" and not model.fp8_block_scaled else "bf16"


def adp_gather_bytes(model: ModelSpec, comm_dtype: str) -> float:
    """Bytes a token's row carries in the attention-DP gather: the hidden state in ``comm_dtype`` with its top-k
    expert ids and weights (moe_comm_dtype), or the BF16 hidden state alone ("")."""
    if not comm_dtype:
        return model.hidden_size * ACT_BYTES
    return (model.hidden_size * _COMM_BYTES_PER_ELEMENT[comm_dtype]
            + model.num_experts_per_token * _ROUTING_BYTES_PER_EXPERT)
