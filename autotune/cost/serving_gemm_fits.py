"""Which device fits price a serving engine's GEMMs: the engine's measured linear and MoE fits in place of the
GEMM sweep's (serving_cluster), and the GEMM rate a checkpoint's weights run at (gemm_rate_dtype)."""

from __future__ import annotations

from functools import lru_cache

from autotune.cost.serving_experts import EXPERT_GEMM_CLASS, W4A16_CEILING_CLASS, W4A16_STREAM_CLASS, has_gemm_fit
from autotune.spec.hardware import ClusterSpec

__all__ = ["fp8_linear_cluster", "gemm_rate_dtype", "serving_cluster", "trtllm_gen_moe"]

# A device profile may fit a GEMM format as a serving engine runs its linear layers: the activation's
# quantization and the engine's block-scaled GEMM, measured at serving shapes (regressions.serving_gemm,
# Blackwell NVFP4). Engines whose preset says so (ServingEngine.nvfp4_gemm_fit "linear") price those GEMMs
# with it instead of the square-GEMM sweep under regressions.gemm, which training recipes (Transformer
# Engine's cuBLASLt GEMMs) and the other engines keep.
_SERVING_GEMM_CLASS = "serving_gemm"
# Likewise its MoE layer's grouped GEMMs (regressions.serving_moe_gemm): under "linear" they take the key
# EXPERT_GEMM_CLASS, which experts_s prices the expert GEMMs with.
_SERVING_MOE_GEMM_CLASS = "serving_moe_gemm"
# TensorRT-LLM's other MoE backend (moe_config backend TRTLLM: TRTLLMGenFusedMoE, Blackwell), measured
# as its own fit (regressions.serving_moe_gemm_trtllm_gen); it runs a per-step token tile (expert_tiles.py)
_TRTLLM_GEN_MOE_CLASS = "serving_moe_gemm_trtllm_gen"
# An engine's weight-only 4-bit MoE kernel (vLLM's Marlin on Hopper) at large batches, where its rate falls below
# the BF16 GEMM fit (regressions.serving_moe_w4a16_<engine>.bf16): a ceiling on the experts' unpadded FLOPs
_W4A16_MOE_CLASS = "serving_moe_w4a16"
@lru_cache(maxsize=64)
def serving_cluster(cluster: ClusterSpec, nvfp4_gemm_fit: str, fp8_block: bool = False, moe_backend: str = "",
                    untuned_moe: bool = False, w4a16_ceiling: bool = True) -> ClusterSpec:
    """``cluster`` with its device's serving NVFP4 GEMM fit in place of its GEMM fit under
    ``nvfp4_gemm_fit`` "linear" (TensorRT-LLM's linear and MoE fits), "linear_dense" (its linear fit only: the
    experts at the sweep) or an engine's name (that engine's,
    serving_gemm_<engine> and serving_moe_gemm_<engine>); with ``fp8_block`` (a checkpoint of 128x128-block
    FP8 scales) the same engine's fp8_block fits in place of its FP8 ones; under ``moe_backend`` "trtllm"
    the experts at the TRTLLM-Gen MoE fit where the profile has one (trtllm_gen_moe); with ``untuned_moe`` (no
    tuned fused-MoE config for the shape, cost/moe_configs.py) at the engine's default-tile fit; without
    ``w4a16_ceiling`` not its weight-only 4-bit MoE fit (Marlin's: the MXFP4 experts run another kernel); the same object
    where the profile has none or the engine runs the sweep's rate, so step caches keep hitting."""
    device = cluster.device
    renames = _best_measured(device) if nvfp4_gemm_fit == "best_measured" else _renames(nvfp4_gemm_fit)
    formats = {"nvfp4": "nvfp4", "fp8_block": "fp8"} if fp8_block else {"nvfp4": "nvfp4"}
    serving = {(renames[op_class], formats[dtype]): fit for (op_class, dtype), fit in device.compute.items()
               if op_class in renames and dtype in formats}
    # a format whose linear is measured and its MoE layer not: the experts keep the sweep, not the linear's fit
    serving |= {(EXPERT_GEMM_CLASS, fmt): device.compute[("gemm", fmt)] for op_class, fmt in list(serving)
                if op_class == "gemm" and (EXPERT_GEMM_CLASS, fmt) not in serving and ("gemm", fmt) in device.compute}
    serving |= {(W4A16_CEILING_CLASS, dtype): fit for (op_class, dtype), fit in device.compute.items()
                if op_class == f"{_W4A16_MOE_CLASS}_{nvfp4_gemm_fit}" and w4a16_ceiling}
    serving |= {(W4A16_STREAM_CLASS, dtype): fit for (op_class, dtype), fit in device.compute.items()
                if op_class == f"{_W4A16_MOE_CLASS}_stream_{nvfp4_gemm_fit}" and w4a16_ceiling}
    if untuned_moe:
        serving |= {(EXPERT_GEMM_CLASS, dtype): fit for (op_class, dtype), fit in device.compute.items()
                    if op_class == f"{_SERVING_MOE_GEMM_CLASS}_{nvfp4_gemm_fit}_untuned"}
    if moe_backend == "trtllm":  # after the engine's MoE fit: this one replaces it
        serving |= {(EXPERT_GEMM_CLASS, formats[dtype]): fit for (op_class, dtype), fit in device.compute.items()
                    if op_class == _TRTLLM_GEN_MOE_CLASS and dtype in formats}
    if not serving:
        return cluster
    return cluster.with_changes(device=device.with_changes(compute={**device.compute, **serving}))


@lru_cache(maxsize=64)
def fp8_linear_cluster(cluster: ClusterSpec, fp8_gemm_fit: str, fp8_block: bool) -> ClusterSpec:
    """``cluster`` with its device's measured per-tensor FP8 linear (regressions.serving_gemm.fp8: TensorRT-LLM's
    FP8 linear, in_engine) in place of the FP8 GEMM sweep under ``fp8_gemm_fit`` "linear", the MoE experts keeping
    the sweep (EXPERT_GEMM_CLASS where the device has no experts' fit of their own); the same object where the
    engine runs the sweep, the checkpoint is block-scaled (``fp8_block``: serving_cluster's block-scale fits) or
    the device has no such fit, so step caches keep hitting."""
    device = cluster.device
    linear = device.compute.get((_SERVING_GEMM_CLASS, "fp8"))
    if fp8_gemm_fit != "linear" or fp8_block or linear is None or ("gemm", "fp8") not in device.compute:
        return cluster
    experts = {(EXPERT_GEMM_CLASS, "fp8"): device.compute.get((EXPERT_GEMM_CLASS, "fp8"), device.compute[("gemm", "fp8")])}
    return cluster.with_changes(device=device.with_changes(compute={**device.compute, ("gemm", "fp8"): linear, **experts}))


def _best_measured(device) -> dict[str, str]:
    """The fastest NVFP4 linear the device has measured in an engine (the serving_gemm* fit of the highest
    asymptote, activation quantization included) in place of the GEMM sweep, for the dense linear layers only:
    a TensorRT engine's own FP4 GEMM (no gemm_plugin), measured nowhere. The sweep is no bound for it: its FP4
    inputs were uniform draws on [-1, 1] cast to E2M1 (five values), where every measured linear ran on randn
    data at the GPU's power limit (docs/serving.md, "MLPerf's TensorRT NVFP4 GEMMs")."""
    fits = [(fit.seconds_per_unit, op_class) for (op_class, dtype), fit in device.compute.items()
            if dtype == "nvfp4" and op_class.startswith(_SERVING_GEMM_CLASS) and fit.in_engine]
    return {min(fits)[1]: "gemm"} if fits else {}


def _renames(nvfp4_gemm_fit: str) -> dict[str, str]:
    """The device fits that take the GEMM sweep's and the experts' keys under ``nvfp4_gemm_fit``."""
    if nvfp4_gemm_fit == "linear":
        return {_SERVING_GEMM_CLASS: "gemm", _SERVING_MOE_GEMM_CLASS: EXPERT_GEMM_CLASS}
    if nvfp4_gemm_fit == "linear_dense":  # the experts keep the sweep (the fallback in serving_cluster)
        return {_SERVING_GEMM_CLASS: "gemm"}
    return {f"{_SERVING_GEMM_CLASS}_{nvfp4_gemm_fit}": "gemm", f"{_SERVING_MOE_GEMM_CLASS}_{nvfp4_gemm_fit}": EXPERT_GEMM_CLASS}


def gemm_rate_dtype(device, weight_dtype: str, mxfp4_activation: str) -> str:
    """The GEMM fit that prices GEMMs on weights of ``weight_dtype``. NVFP4: the FP4 fit where the
    device has one. MXFP4 on a device without FP4 tensor cores (Hopper, Ampere) runs weight-only,
    dequantised to BF16 inside the GEMM (TensorRT-LLM model_config.py get_mxfp4_quant_algo: W4A16_MXFP4
    below SM100; vLLM mxfp4.py: Triton matmul_ogs or Marlin on SM90); on Blackwell at the engine's
    activation format (``mxfp4_activation``: BF16, or MXFP8 at the FP8 tensor-core rate: FP4 x FP8
    operands take tcgen05.mma kind::f8f6f4, the FP8 rate; only FP4 x FP4, kind::mxf4, gets the FP4 rate)."""
    if weight_dtype == "nvfp4":
        return "nvfp4" if has_gemm_fit(device, "nvfp4") else "bf16"
    if weight_dtype == "mxfp4":
        return mxfp4_activation if has_gemm_fit(device, "nvfp4") and has_gemm_fit(device, mxfp4_activation) else "bf16"
    return weight_dtype


def trtllm_gen_moe(device, rate_dtype: str) -> bool:
    """Whether ``device`` has TensorRT-LLM's TRTLLM-Gen MoE measured for experts at ``rate_dtype``."""
    return (_TRTLLM_GEN_MOE_CLASS, rate_dtype) in device.compute
