"""The operator-table pricing a serving step is built from (cost/serving_step.py): the bytes a stored
weight takes in each checkpoint format, operator selections, and the roofline seconds of a table's
operators for every token count."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from autotune.cost.checkpoint_layout import bf16_attention, bf16_attention_gemms
from autotune.cost.compute import op_amounts, op_coefficients
from autotune.graph.table import OpTable
from autotune.spec.workload import GEMM_OPERAND_BYTES, compute_dtype, gemm_dtype

__all__ = ["ACT_BYTES", "EXPERTS_ONLY_DTYPES", "FUSED_INTO_ALLREDUCE", "FUSION_MIN_HIDDEN", "STORED_BYTES", "expert_pad_factor",
           "fused_residual_adds", "swiglu_in_gemm",
           "not_attention", "ops_s", "quantized_gemms", "select_ops", "unfused", "weight_bytes_per_param", "weights_per_gpu",
           "without_attention", "without_loss"]

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


def expert_pad_factor(model, expert_tp: int, pad: tuple[int, ...]) -> float:
    """How much more an expert's stored weights take once a kernel pads them: its hidden size up to
    ``pad[0]``'s multiple and its intermediate size per partition (the expert's FFN over ``expert_tp``
    ranks) up to ``pad[1]``'s, both projections scaling with the two (vLLM's Marlin MXFP4 MoE: w13
    (E, 2 I', H' / 2), w2 (E, H', I' / 2) and their scales, Mxfp4MoEMethod.create_weights)."""
    hidden, inner = model.hidden_size, model.expert_ffn_hidden_size / expert_tp

    def up(size: float, multiple: int) -> float:
        return -(-size // multiple) * multiple

    return up(hidden, pad[0]) / hidden * up(inner, pad[1]) / inner


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
    serial_lat, per_k = _serial_loop(table, device, rate_dtype, gemm)
    if per_k.any():  # GEMMs whose fit measures the serial main loop of a one-wave tile (Regression.serial_latency_s)
        depth = table.in_bytes / ACT_BYTES / np.where(table.in_split, float(tp), 1.0)  # K a GPU: its input's width
        ops = np.maximum(ops, np.where(per_k > 0, table.kernels * serial_lat + depth * per_k + weights * coef_a.spb, 0.0))
    return (ops * _engine_scale(device, rate_dtype, gemm)).sum(-1)


def _engine_scale(device, rate_dtype: str, gemm: np.ndarray) -> np.ndarray:
    """Per operator, what undoes the kernel_efficiency every arm above was divided by: the device's
    efficiency for GEMMs whose fit was made on the engine's own op (Regression.in_engine: its compute,
    serial and memory arms reproduce the measured op as fitted), 1 for everything else."""
    fit = device.compute.get(("gemm", gemm_dtype(rate_dtype)))
    return np.where(gemm, device.kernel_efficiency, 1.0) if fit is not None and fit.in_engine else np.ones(len(gemm))


def _serial_loop(table: OpTable, device, rate_dtype: str, gemm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per operator: the serial main-loop latency and seconds per unit of K of the GEMM fit at
    ``rate_dtype`` (zeros for other operators and fits without it), at the device's kernel efficiency."""
    fit = device.compute.get(("gemm", gemm_dtype(rate_dtype)))
    if fit is None or not fit.seconds_per_reduction:
        return np.zeros(len(table.names)), np.zeros(len(table.names))
    eff = device.kernel_efficiency
    return (np.where(gemm, fit.serial_latency_s / eff, 0.0), np.where(gemm, fit.seconds_per_reduction / eff, 0.0))


# GEMMs a pre-quantized checkpoint keeps in BF16: MoE routers (NVIDIA/TensorRT-Model-Optimizer
# modelopt/torch/quantization/config.py @09914046 _default_disabled_quantizer_cfg, in every FP8/NVFP4/MX
# config: "*router*", "*mlp.gate.*", "*block_sparse_moe.gate*" off; GPT-OSS: mlp.router in modules_to_not_convert).
_UNQUANTIZED_GEMMS = ("router",)


def quantized_gemms(table: OpTable) -> np.ndarray:
    """Which operators are GEMMs on the checkpoint's quantized weights."""
    return np.array([k == "gemm" and n not in _UNQUANTIZED_GEMMS for k, n in zip(table.kinds, table.names)])


def weights_per_gpu(tables, model, shape, weight_dtype: str, pad: tuple = ()) -> float:
    """Weight bytes one GPU holds: TP-split layers (experts over ep x tp/ep), vocab-parallel
    embedding and head, replicated norms (``shape``: a serving_step.ReplicaShape); GEMM weights in the weight format, the rest in BF16; under
    pipeline parallelism the fuller of the two end stages. ``pad``: the MXFP4 experts' padding
    (expert_pad_factor), where the engine's weight-only kernel pads them."""
    def per_gpu(table: OpTable, tp: int, dtype: str) -> float:
        gemm = quantized_gemms(table) | np.array([k == "embedding" for k in table.kinds])
        if bf16_attention(model, dtype):
            gemm = gemm & ~bf16_attention_gemms(model, table)
        params = table.params / np.where(table.weights_split, tp, 1.0)
        return float((params * np.where(gemm, weight_bytes_per_param(dtype), ACT_BYTES)).sum())

    other = "bf16" if weight_dtype in EXPERTS_ONLY_DTYPES else weight_dtype
    dense, moe = tables.layer_counts()
    total = dense * per_gpu(tables.layer, shape.op_tp, other)
    if moe:  # experts: E / ep of them over tp / ep GPUs each, W / tp a GPU whatever ep is
        experts = per_gpu(tables.experts, shape.tp, weight_dtype)
        if pad:
            experts *= expert_pad_factor(model, shape.tp // shape.ep, pad)
        total += moe * (per_gpu(tables.moe_layer, shape.op_tp, other) + experts)
    # the token embedding and the LM head stay BF16 in every pre-quantized checkpoint: ModelOpt quantizes the
    # linear layers "within transformers blocks" (nvidia/Llama-3.1-405B-Instruct-FP4 model card) and its
    # _default_disabled_quantizer_cfg turns "*lm_head*" off (config.py @09914046); GPT-OSS lists
    # embed_tokens and lm_head in modules_to_not_convert
    ends = [per_gpu(block, shape.op_tp, "bf16") for block in (tables.embedding, tables.head) if block is not None]
    if shape.pp == 1:
        return total + sum(ends)
    # pipeline stages: 1/pp of the layers each, the embedding on the first and the head on the last
    # (vLLM's get_pp_indices split); the fuller end stage is the one memory binds
    return total / shape.pp + max(ends, default=0.0)


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


# The residual adds an engine's fused add + RMSNorm kernel runs (ServingEngine.residual_norm_fusion):
# SGLang's RMSNorm.forward_cuda(x, residual) calls fused_add_rmsnorm(x, residual, weight, eps) in place
# (sgl-project/sglang python/sglang/srt/layers/layernorm.py), each decoder layer passing the residual to its
# input and post-attention norms, so the add launches nothing of its own.
_RESIDUAL_ADDS = ("attn_residual", "ffn_residual")


def fused_residual_adds(layer: OpTable) -> OpTable:
    """The layer with its residual adds inside the next RMSNorm's kernel: no launch of their own, and of
    an add's two reads and one write the fused kernel still reads the residual and writes the sum."""
    adds = np.array([n in _RESIDUAL_ADDS for n in layer.names])
    values = {f.name: getattr(layer, f.name) for f in fields(OpTable)}
    values.update(kernels=np.where(adds, 0.0, layer.kernels), in_bytes=np.where(adds, 0.5 * layer.in_bytes, layer.in_bytes))
    return OpTable(**values)


def swiglu_in_gemm(layer: OpTable) -> OpTable:
    """The layer with its gated MLP's activation in the up GEMM's epilogue, no kernel of its own (TensorRT-LLM's
    gemm_swiglu_plugin fp8, FP8 Hopper only: one GEMM + SwiGLU kernel for fc and gate, layers/mlp.py
    fc_gate_plugin, in place of the fused fc GEMM then a swiglu kernel; ServingEngine.gemm_swiglu_fusion). The up
    GEMM keeps its priced output: at serving token counts its compute arm, not its bytes, sets its time."""
    return select_ops(layer, np.array([n != "ffn_act" for n in layer.names]))
