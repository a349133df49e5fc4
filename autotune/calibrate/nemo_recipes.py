"""NeMo / Megatron-Bridge recipe settings the published rows cannot print, each from its recipe
file or Transformer Engine's source (calibrate/modern.py builds the rows with them)."""

from __future__ import annotations

from dataclasses import replace

__all__ = ["NEMO_NO_TP_OVERLAP_PRECISIONS", "NEMO_ACTIVATION_OFFLOAD", "embedding_loss_slots", "with_embedding_loss_slots",
           "fp8_recipe_of", "grad_reduce_in_fp32_of", "fp8_params_of", "low_precision_tp_gathers"]

# Precisions whose NeMo/Megatron-Bridge recipes turn TP communication overlap (userbuffers) off:
# every Llama recipe sets tp_comm_overlap = False if precision == "nvfp4" (scripts/performance/configs/
# llama/llama3_llm_pretrain.py and llama31_llm_pretrain.py @c8327cfc2~1; the flat perf_recipes/llama/
# gb200/llama31.py @067f987 keeps it for llama31_405b_pretrain_256gpu_gb200_nvfp4_config).
NEMO_NO_TP_OVERLAP_PRECISIONS = ("nvfp4",)


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


def embedding_loss_slots(num_layers: int, chunks: int, framework: str) -> int:
    """2 where the embedding and the loss each take a layer's slot in the pipeline split (Megatron-Core's
    account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split, which Megatron-Bridge's
    Llama 3.1 405B recipe sets: recipes/llama/h100/llama3.py @067f987; the Llama 3 paper's sec. 3.3.2
    for Meta's runs) because the layers alone do not split into pp x vpp chunks and the layers plus
    those two do; else 0."""
    fits = num_layers % chunks and not (num_layers + 2) % chunks
    return 2 if fits and framework in ("nemo", "meta") else 0


def with_embedding_loss_slots(plan):
    """The plan of ``num_layers + 2`` slots with one layer fewer on the first stage (the embedding's
    slot) and one fewer on the last (the loss's)."""
    stages, last = [], len(plan.stages) - 1
    for i, stage in enumerate(plan.stages):
        first, end = stage.layers
        stages.append(replace(stage, layers=(max(first - 1, 0), end - 1 - (i == last))))
    return plan.with_changes(stages=tuple(stages))


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


def low_precision_tp_gathers(framework: str, dtype: str, tp: int) -> bool:
    """TrainingWorkload.fp8_tp_all_gather of a row: torchtitan's tensorwise FP8 (torchao's float8 TP
    plans) and Transformer Engine's Linear in every low-precision format, which quantizes a
    sequence-parallel input before gather_along_first_dim or the userbuffers all-gather and the
    output gradient before the backward's (module/linear.py, layernorm_linear.py)."""
    if tp <= 1:
        return False
    return dtype == "fp8" if framework == "torchtitan" else framework == "nemo" and dtype in ("fp8", "mxfp8", "nvfp4")
