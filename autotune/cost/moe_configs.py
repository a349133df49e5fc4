"""Whether vLLM's Triton fused MoE runs a tuned tile config for an expert shape (autotune/data/vllm_moe_configs.toml).

fused_moe.py try_get_optimal_moe_config looks the tiles up in a file per (local experts E, intermediate size per
partition N, device, dtype) and, without one, runs get_default_config: BLOCK_SIZE_M/N/K 64/64/32 for BF16 and
per-tensor FP8 at more tokens than experts (vllm-0.11.0 and 0.14.0 wheels). On H100 and H200 those default tiles
reach 250-350 TFLOP/s where tuned files reach 600-1,500 (aiconfigurator's vLLM 0.14.0 MoE tables split by
scripts/vllm_moe_configs.py); block-scaled FP8's default tiles (64/128/128, 4 warps, 3 stages) run as its tuned
files do, so it is not told apart.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache

from autotune.cost.runtime_kernels import gpu_keys
from autotune.data import data_path

__all__ = ["untuned_experts", "untuned_moe_shape"]


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads(data_path("vllm_moe_configs.toml").read_text())


def untuned_moe_shape(release: str, gpu: str, experts: int, inner: int, weight_dtype: str) -> bool:
    """True where ``release``'s wheel ships no tuned config for ``experts`` local experts of intermediate size
    ``inner`` a partition on ``gpu`` in ``weight_dtype`` (BF16/FP16 or per-tensor FP8); False where it ships
    one, or the release, GPU or format is not one the table lists (their pricing stays as it was)."""
    table = _table()
    files = table.get("releases", {}).get(release, {})
    key = next((k for k in gpu_keys(gpu) if k in table.get("devices", {})), "")
    if not key or key not in files or weight_dtype not in ("bf16", "fp16", "fp8"):
        return False
    name = f"{experts},{inner}" + (",fp8" if weight_dtype == "fp8" else "")
    return name not in files[key]


def untuned_experts(release: str, gpu: str, model, tp: int, ep: int, weight_dtype: str) -> bool:
    """untuned_moe_shape for ``model``'s routed experts on a rank of ``tp`` GPUs, ``ep`` expert groups: E / ep
    local experts, each's intermediate size over tp / ep (vLLM's FusedMoE: local_num_experts, intermediate_size_per_partition)."""
    if not model.is_moe:
        return False
    return untuned_moe_shape(release, gpu, model.num_experts // ep, int(model.expert_ffn_hidden_size) // (tp // ep), weight_dtype)
