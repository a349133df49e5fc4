"""The operator-table pricing a serving step is built from (cost/serving_step.py): the bytes a stored
weight takes in each checkpoint format, operator selections, and the roofline seconds of a table's
operators for every token count."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from autotune.cost.compute import op_amounts, op_coefficients
from autotune.graph.table import OpTable
from autotune.spec.workload import GEMM_OPERAND_BYTES, compute_dtype

__all__ = ["ACT_BYTES", "EXPERTS_ONLY_DTYPES", "FUSED_INTO_ALLREDUCE", "FUSION_MIN_HIDDEN", "STORED_BYTES", "unfused", "not_attention", "ops_s", "quantized_gemms", "select_ops",
           "weight_bytes_per_param", "without_attention", "without_loss"]

ACT_BYTES = 2  # serving engines keep activations in BF16/FP16 whatever the weight format


# MXFP4 (OCP Microscaling spec v1.0): E2M1 elements with one E8M0 scale per 32, 4 + 8 / 32 bits a
# weight; vLLM's Mxfp4MoEMethod.create_weights holds uint8 pairs and a uint8 scale per 32 (mxfp4.py @007d5005).
STORED_BYTES = {"mxfp4": (4.0 + 8.0 / 32.0) / 8.0}
# Formats whose checkpoints quantize the routed experts only: GPT-OSS's config.json quantization_config
# (quant_method mxfp4) leaves self_attn, mlp.router, embed_tokens and lm_head in BF16
# (tests/data/hf_configs/gpt-oss-120b.json), and vLLM's Mxfp4Config gives linear layers
# UnquantizedLinearMethod, MXFP4 only to FusedMoE (mxfp4.py @007d5005).
EXPERTS_ONLY_DTYPES = ("mxfp4",)


# Block scales a pre-quantized weight carries, in bytes per weight: NVFP4 one FP8 E4M3 scale per 16
# E2M1 weights (NVIDIA, "Pretraining LLMs with NVFP4", arXiv 2509.25149, sec. 2), held and read beside
# them: TensorRT-LLM's NVFP4LinearMethod.create_weights makes weight_scale (out_features,
# in_features / 16) float8_e4m3fn (_torch/modules/linear.py), which nvfp4_gemm takes with the weight.
_WEIGHT_SCALE_BYTES = {"nvfp4": 1.0 / 16.0}


def weight_bytes_per_param(weight_dtype: str) -> float:
    """Bytes of one stored weight: pre-quantized FP8 checkpoints keep 1 byte, NVFP4 4 bits and its
    block scales (4.5 bits), MXFP4 4.25 bits with its scales."""
    if weight_dtype in STORED_BYTES:
        return STORED_BYTES[weight_dtype]
    return GEMM_OPERAND_BYTES.get(weight_dtype, 2.0 if weight_dtype in ("bf16", "fp16") else 4.0) \
        + _WEIGHT_SCALE_BYTES.get(weight_dtype, 0.0)


def not_attention(table: OpTable) -> np.ndarray:
    return np.array([k != "attention" for k in table.kinds])


def without_attention(table: OpTable) -> OpTable:
    return select_ops(table, not_attention(table))


def without_loss(table: OpTable) -> OpTable:
    return select_ops(table, np.array([k != "loss" for k in table.kinds]))


def select_ops(table: OpTable, keep: np.ndarray) -> OpTable:
    """The operators of ``table`` where ``keep`` is true."""
    values = {}
    for f in fields(OpTable):
        value = getattr(table, f.name)
        values[f.name] = tuple(v for v, k in zip(value, keep) if k) if isinstance(value, tuple) else value[keep]
    return OpTable(**values)


def ops_s(table: OpTable, device, weight_dtype: str, rate_dtype: str, tokens: np.ndarray, tp: int,
           weight_share: np.ndarray | float = 1.0, flop_share: np.ndarray | float = 1.0) -> np.ndarray:
    """Roofline seconds of the table's operators for each token count (forward, one pass): GEMMs
    at ``rate_dtype``'s fit reading the weight format's bytes (``weight_share`` of them) and doing
    ``flop_share`` of their FLOPs (tile padding), everything else at the activation dtype."""
    gemm = quantized_gemms(table)
    coef_w = op_coefficients(table, device, rate_dtype)
    coef_a = op_coefficients(table, device, compute_dtype(weight_dtype) if weight_dtype not in STORED_BYTES else "bf16")
    lat_c, spf = np.where(gemm, coef_w.lat_c, coef_a.lat_c), np.where(gemm, coef_w.spf, coef_a.spf)
    amounts = op_amounts(table, tokens, tp, 1, False)
    share = np.asarray(weight_share, dtype=float)[..., None]
    weights = amounts.weight_bytes * np.where(gemm, weight_bytes_per_param(weight_dtype) / ACT_BYTES, 1.0) * share
    act = amounts.act_in_bytes + amounts.act_out_bytes
    flops = amounts.flops * np.where(gemm, np.asarray(flop_share, dtype=float)[..., None], 1.0)
    ops = np.maximum(table.kernels * lat_c + flops * spf,
                     table.kernels * coef_a.lat_m + (act + weights) * coef_a.spb)
    return ops.sum(-1)


# GEMMs a pre-quantized checkpoint keeps in BF16: MoE routers (NVIDIA/TensorRT-Model-Optimizer
# modelopt/torch/quantization/config.py @09914046 _default_disabled_quantizer_cfg, in every FP8/NVFP4/MX
# config: "*router*", "*mlp.gate.*", "*block_sparse_moe.gate*" off; GPT-OSS: mlp.router in modules_to_not_convert).
_UNQUANTIZED_GEMMS = ("router",)


def quantized_gemms(table: OpTable) -> np.ndarray:
    """Which operators are GEMMs on the checkpoint's quantized weights."""
    return np.array([k == "gemm" and n not in _UNQUANTIZED_GEMMS for k, n in zip(table.kinds, table.names)])


# Operators an engine's fused TP all-reduce runs (ServingEngine.allreduce_norm_fusion): TensorRT-LLM's PyTorch
# backend passes AllReduceParams(fusion_op=RESIDUAL_RMS_NORM[_QUANT_FP8 / _QUANT_NVFP4]) to the all-reduce after
# attention (the residual add and the MLP's input norm) and after the MLP (the residual add and the next layer's
# input norm) where the model has TP, for Llama only above hidden size 4096 ("Disable fusion for small models
# due to accuracy issues", _torch/models/modeling_llama.py LlamaDecoderLayer PRE_MLP_FUSION / POST_MLP_FUSION,
# stored 1.x revision); DeepSeek-V3's layer the same (tech blog 1, Modules 9 and 13).
FUSED_INTO_ALLREDUCE = ("attn_residual", "ffn_norm", "ffn_residual", "attn_norm")
FUSION_MIN_HIDDEN = 4096


def unfused(layer: OpTable) -> OpTable:
    """The layer's operators but those its fused all-reduces run (FUSED_INTO_ALLREDUCE)."""
    return select_ops(layer, np.array([n not in FUSED_INTO_ALLREDUCE for n in layer.names]))
