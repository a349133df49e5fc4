"""TensorRT-LLM's routed-expert MoE layer as measured, where the engine's table holds the model's expert shape.

cost/serving_experts.py prices the routed experts from grouped-GEMM fits made on balanced routing (every
expert the same rows) and multiplies the busiest EP rank's rows by the modelled power-law skew
(cost/moe_skew.py). NVIDIA's aiconfigurator also measured TensorRT-LLM's whole fused-MoE module under the
same power-law routing it prices with (alpha 1.01 for DeepSeek-V3/R1; collector/trtllm/collect_moe.py @095f58a5
times the rank given the busiest load, in a CUDA graph): on DeepSeek's shape at EP 8 that time runs 12-27%
above the fit-times-skew pricing at 1k-16k tokens (H200 block-FP8 CUTLASS 0.557 ms a layer at 1,024 tokens
against 0.439; B200 NVFP4 CUTLASS 0.336 against 0.270), and below it at a few tokens. Where the table
(autotune/data/trtllm_moe.toml, scripts/extract_trtllm_moe.py) has the GPU, backend, dtype and
(moe_tp, moe_ep) of a deployment with EP > 1 and no expert load balancer, its time, interpolated in
log-log over the tokens entering the layer (linear past the last point), replaces the fit's; elsewhere
the fit stays. The module's time covers the permutes and the experts' grouped GEMMs, not the router GEMM
or the attention-DP exchange (priced apart, cost/serving_collectives.py). BF16 rows (1.3.0rc10) price an
NVFP4 checkpoint's BF16 MTP module (cost/serving_speculative.py drafts).
"""

from __future__ import annotations

import tomllib
from functools import lru_cache

import numpy as np

from autotune.cost.runtime_kernels import gpu_keys
from autotune.data import data_path
from autotune.spec.model import ModelSpec

__all__ = ["MEASURED_MOE_SHAPE", "measured_moe_key", "measured_moe_s"]

# the expert shape the table holds: DeepSeek-V3/R1 config.json (hidden_size, moe_intermediate_size,
# n_routed_experts, num_experts_per_tok)
MEASURED_MOE_SHAPE = (7168, 2048, 256, 8)


@lru_cache(maxsize=1)
def _layers() -> dict:
    return tomllib.loads(data_path("trtllm_moe.toml").read_text())["layers"]


def measured_moe_key(model: ModelSpec, gpu: str, weight_dtype: str, moe_backend: str, tp: int, ep: int,
                     eplb: bool = False) -> str:
    """The table's key for this deployment's routed experts, or "" where it has none (the fit prices them)."""
    if not model.is_moe or ep <= 1 or eplb or not model.router_groups:  # alpha 1.01: group-limited routing
        return ""
    shape = (model.hidden_size, int(model.expert_ffn_hidden_size), model.num_experts, model.num_experts_per_token)
    dtype = "fp8_block" if weight_dtype == "fp8" and model.fp8_block_scaled else weight_dtype
    if shape != MEASURED_MOE_SHAPE or dtype not in ("fp8_block", "nvfp4", "bf16"):
        return ""
    backend = "trtllm" if moe_backend == "trtllm" else "cutlass"
    key = f"{gpu_keys(gpu)[0]}.{backend}.{dtype}.{tp // ep}x{ep}"
    return key if key in _layers() else ""


def measured_moe_s(key: str, tokens) -> np.ndarray:
    """Seconds of one MoE layer's routed experts at each of ``tokens`` (the step's tokens entering the layer
    across the EP group) from the table's row ``key``: log-log between its points, linear past the last."""
    points, ms = (np.asarray(v, dtype=float) for v in _layers()[key])
    seconds = ms * 1e-3
    t = np.maximum(np.asarray(tokens, dtype=float), points[0])
    inside = np.exp(np.interp(np.log(t), np.log(points), np.log(seconds)))
    slope = (seconds[-1] - seconds[-2]) / (points[-1] - points[-2])
    return np.where(t > points[-1], seconds[-1] + slope * (t - points[-1]), inside)
