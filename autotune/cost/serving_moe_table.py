"""TensorRT-LLM's routed-expert MoE layer as measured, where the engine's table holds the model's expert shape.

cost/serving_experts.py prices the routed experts from grouped-GEMM fits made on balanced routing (every expert
the same rows) and multiplies the busiest EP rank's rows by the modelled power-law skew (cost/moe_skew.py).
NVIDIA's aiconfigurator also measured TensorRT-LLM's whole fused-MoE module under the same power-law routing it
prices with (collector/trtllm/collect_moe.py @095f58a5 times the rank given the busiest load, in a CUDA graph):
on DeepSeek's shape at EP 8 that time runs 12-27% above the fit-times-skew pricing at 1k-16k tokens (H200 block-
FP8 CUTLASS 0.557 ms a layer at 1,024 tokens against 0.439; B200 NVFP4 CUTLASS 0.336 against 0.270), and below it
at a few tokens; with the experts TP-split over 8 GPUs (moe_tp 8) it runs 46-51% above the fit at 512-16k tokens
for Qwen3-235B's shape on H200 per-tensor FP8 (0.634 ms at 4,096 tokens against 0.435) and 21-98% above it at
1k-16k on B200 NVFP4, and on one B200 (Qwen3-30B-A3B, NVFP4) 21-73% above it at 1k-16k tokens (1.3.0rc20
CUTLASS). Where the table (autotune/data/trtllm_moe.toml, scripts/extract_trtllm_moe.py) has the model's expert
shape at the exponent it is routed with (moe_skew.routing_alpha), the GPU, backend, dtype and (moe_tp, moe_ep) of
a deployment without an expert load balancer, its time, interpolated in log-log over the tokens entering the
layer (linear past the last point), replaces the fit's; elsewhere the fit stays. The module's time covers the
permutes and the experts' grouped GEMMs, not the router GEMM, a shared expert or the TP / attention-DP exchange
(priced apart, cost/serving_collectives.py). BF16 rows (1.3.0rc10) price an NVFP4 checkpoint's BF16 MTP module
(cost/serving_speculative.py drafts).
"""

from __future__ import annotations

import tomllib
from functools import lru_cache

import numpy as np

from autotune.cost.moe_skew import routing_alpha
from autotune.cost.runtime_kernels import gpu_keys
from autotune.data import data_path
from autotune.spec.model import ModelSpec

__all__ = ["measured_moe_key", "measured_moe_s"]


@lru_cache(maxsize=1)
def _layers() -> dict:
    return tomllib.loads(data_path("trtllm_moe.toml").read_text())["layers"]


def measured_moe_key(model: ModelSpec, gpu: str, weight_dtype: str, moe_backend: str, tp: int, ep: int,
                     eplb: bool = False) -> str:
    """The table's key for this deployment's routed experts, or "" where it has none (the fit prices them):
    the model's expert shape (config.json hidden_size, moe_intermediate_size, experts, top-k) at the power-law
    exponent it is routed with (moe_skew.routing_alpha), the GPU, backend, dtype and (moe_tp, moe_ep)."""
    if not model.is_moe or eplb:  # a balancer: not the collector's routing
        return ""
    dtype = "fp8_block" if weight_dtype == "fp8" and model.fp8_block_scaled else weight_dtype
    shape = (f"{model.hidden_size}x{int(model.expert_ffn_hidden_size)}x{model.num_experts}x{model.num_experts_per_token}"
             f"@{routing_alpha(model)}")
    backend = "trtllm" if moe_backend == "trtllm" else "cutlass"
    key = f"{gpu_keys(gpu)[0]}.{backend}.{dtype}.{shape}.{tp // ep}x{ep}"
    return key if key in _layers() else ""


def measured_moe_s(key: str, tokens) -> np.ndarray:
    """Seconds of one MoE layer's routed experts at each of ``tokens`` (the step's tokens entering the layer
    across the EP group) from the table's row ``key``: log-log between its points, linear past the last at the
    steeper of the last segment's slope and the slope over the last doubling of tokens (one low last point, as
    H200 FP8 Qwen3-235B moe_ep 8 has at 16,384 tokens, 1.161 ms against 1.114 at 12,288, flattens the first)."""
    points, ms = (np.asarray(v, dtype=float) for v in _layers()[key])
    seconds = ms * 1e-3
    t = np.maximum(np.asarray(tokens, dtype=float), points[0])
    inside = np.exp(np.interp(np.log(t), np.log(points), np.log(seconds)))
    half = np.exp(np.interp(np.log(points[-1] / 2.0), np.log(points), np.log(seconds)))
    slope = max((seconds[-1] - seconds[-2]) / (points[-1] - points[-2]), (seconds[-1] - half) / (points[-1] / 2.0))
    return np.where(t > points[-1], seconds[-1] + slope * (t - points[-1]), inside)
