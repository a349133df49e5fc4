"""NeMo / Megatron-Bridge recipe settings the published rows cannot print, each from its recipe
file or Transformer Engine's source (calibrate/modern.py builds the rows with them)."""

from __future__ import annotations

__all__ = ["NEMO_ACTIVATION_OFFLOAD", "fp8_recipe_of", "grad_reduce_in_fp32_of", "fp8_params_of"]

# Layers whose activations NeMo / Megatron-Bridge performance recipes offload to the host (Megatron-Core
# cpu_offloading_num_layers; StagePlan.activation_offload_layers): (container, gpu, model as in the row,
# precision) -> (N, source). The recipes set cpu_offloading = True with it (v0.1.0rc4 scripts/performance/
# utils/helpers.py:131-135; v0.2.0 helpers.py:170-173). Applied only to a single-stage plan, the recipes'
# Megatron-FSDP layout (Megatron-Core refuses offloading with pipeline parallelism). "fp8" is the fp8_cs
# config, the current-scaling FP8 of Megatron-Bridge's tables (nemo_recipes.fp8_recipe_of).
_MB_0_1_L70 = "Megatron-Bridge v0.1.0rc4 scripts/performance/configs/llama3/llama3_70b_llm_pretrain.yaml"
_MB_0_2_L3 = "Megatron-Bridge v0.2.0 scripts/performance/configs/llama3/workload_base_configs.py"
NEMO_ACTIVATION_OFFLOAD = {
    ("25.09", "GB200", "LLAMA3_70B", "bf16"): (20, f"{_MB_0_1_L70}:127-133 gb200 bf16 (mbs 1, Megatron-FSDP)"),
    ("25.09", "GB200", "LLAMA3_70B", "fp8"): (40, f"{_MB_0_1_L70}:140-146 gb200 fp8_cs (mbs 2, Megatron-FSDP)"),
    ("25.11", "GB200", "LLAMA3_70B", "bf16"): (20, f"{_MB_0_2_L3}:66-70 LLAMA3_70B_GB200_BF16_BASE_CONFIG"),
    ("25.11", "GB200", "LLAMA3_70B", "fp8"): (40, f"{_MB_0_2_L3}:73-78 LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG"),
    ("25.11", "B200", "LLAMA3_70B", "fp8"): (5, f"{_MB_0_2_L3}:108-112 LLAMA3_70B_B200_FP8_CS_BASE_CONFIG"),
}


def fp8_recipe_of(row: dict[str, str], framework: str) -> str:
    """TrainingWorkload.fp8_recipe of a row: NeMo's TE layers under delayed scaling (its performance
    scripts' default, ds), Megatron-Bridge's under current scaling (fp8_cs), standalone casts elsewhere."""
    if framework != "nemo":
        return "cast"
    return "te_current" if "megatron-bridge" in row.get("framework", "").lower() else "te_delayed"


# NeMo 2 performance scripts from 2025 (NVIDIA/NeMo scripts/performance/utils.py @efa5817, 2025-04:
# set_primary_perf_configs sets trainer.plugins.grad_reduce_in_fp32 = False for FP8 runs; helpers.py
# set_precision_configs later for all) and every Megatron-Bridge performance recipe (v0.1.0rc4
# configs/*_llm_pretrain.yaml grad_reduce_in_fp32: false; v0.2.0-v0.5.1 configs/*/*_llm_pretrain.py
# cfg.ddp.grad_reduce_in_fp32 = False; v0.6.0 perf_recipes/_common.py) reduce gradients in bf16.
_BF16_GRAD_NEMO_RELEASES = ("NeMo 25.04",)


def grad_reduce_in_fp32_of(row: dict[str, str], framework: str) -> bool:
    """TrainingWorkload.grad_reduce_in_fp32 of a row: False for Megatron-Bridge's tables and NeMo
    25.04's FP8 rows (see above); NeMo 24.x's tables (NeMo 1 launcher configs) keep Megatron's fp32."""
    if framework != "nemo":
        return True
    source = row.get("source", "")
    if "megatron-bridge" in row.get("framework", "").lower() or "Megatron-Bridge" in source:
        return False
    precision = row.get("precision") or row.get("dtype") or "bf16"
    return not (any(r in source for r in _BF16_GRAD_NEMO_RELEASES) and precision != "bf16")


def fp8_params_of(row: dict[str, str], framework: str, dtype: str) -> bool:
    """TrainingWorkload.fp8_params of a row: Megatron-Bridge's FP8 and MXFP8 precision configs set
    fp8_param_gather (training/mixed_precision.py v0.1.0rc4-v0.4.2: bf16_with_fp8_delayed_scaling_mixed,
    bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed; not bf16_with_nvfp4_mixed, nor the
    sub-channel FP8 that the 25.09/25.11 tables' numbers in parentheses use: 32x32 blocks on B200/GB200,
    128x128 weights on H100, bf16_with_fp8_subchannel_scaling_mixed); NeMo 25.04's per-tensor FP8
    (nemo/collections/llm/recipes/precision/mixed_precision.py @efa5817 bf16_with_fp8_mixed: True;
    bf16_with_mxfp8_mixed: False). NeMo 24.x's tables do not say (False)."""
    if framework != "nemo" or dtype not in ("fp8", "mxfp8"):
        return False
    source = row.get("source", "")
    if "megatron-bridge" in row.get("framework", "").lower() or "Megatron-Bridge" in source:
        return not (dtype == "fp8" and "alt variant in parentheses" in row.get("model", ""))
    return dtype == "fp8" and any(r in source for r in _BF16_GRAD_NEMO_RELEASES)
