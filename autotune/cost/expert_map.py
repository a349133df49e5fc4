"""The elementwise work an engine's expert-parallel MoE layer does on rows routed to other ranks.

Without an all-to-all (expert parallelism inside one TP group, every rank holding every token), vLLM's
Triton fused MoE runs each rank's experts through an ``expert_map`` that marks the other ranks' experts -1:
its grouped GEMMs skip (0.14.0 on) or zero-fill (0.11.0) those rows' blocks, but the activation, the
block-scaled quantization of its output, the zeroing of the down GEMM's output and the final moe_sum run
over all ``tokens x k`` routed rows (vllm-0.11.0 and vllm-0.14.0 wheels, PyPI:
model_executor/layers/fused_moe/fused_moe.py fused_experts_impl: intermediate_cache1/2/3 sized
``M x top_k``, silu_and_mul on ``intermediate_cache1.view(-1, N)``, ``intermediate_cache3.zero_()`` under an
expert_map, ``ops.moe_sum(intermediate_cache3)``; 0.11.0's fused_moe_kernel write_zeros_to_output where
``off_experts == -1``). The step model prices the rank's experts on its own rows (busiest / ep); this is
what the masked rows add.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.serving_ops import ACT_BYTES, ops_s, select_ops
from autotune.graph.table import OpTable

__all__ = ["masked_rows_s", "triton_experts"]


def masked_rows_s(experts: OpTable, moves: OpTable, expert_device, device, weight_dtype: str, rate_dtype: str,
                  tokens: np.ndarray, own_rows: np.ndarray, expert_tp: int, hidden: int, k: int) -> np.ndarray:
    """Seconds one EP rank adds for each token count by running its activation and moe_sum over every
    routed row (``tokens``) instead of its own (``own_rows``, in tokens: busiest / ep), and zeroing the
    down GEMM's ``tokens x k x hidden`` output first (one write at the device's memory fit)."""
    act = select_ops(experts, np.array([kind != "gemm" for kind in experts.kinds]))
    total = np.asarray(ops_s(act, expert_device, weight_dtype, rate_dtype, tokens, expert_tp)
                       - ops_s(act, expert_device, weight_dtype, rate_dtype, own_rows, expert_tp))
    unpermute = select_ops(moves, np.array([n == "unpermute" for n in moves.names]))
    if len(unpermute.names):
        total = total + ops_s(unpermute, device, weight_dtype, rate_dtype, tokens, 1) \
            - ops_s(unpermute, device, weight_dtype, rate_dtype, own_rows, 1)
    memory, eff = device.memory, device.kernel_efficiency
    zeroed = np.where(tokens > 0, (memory.latency_s + tokens * k * hidden * ACT_BYTES * memory.seconds_per_unit) / eff, 0.0)
    return np.maximum(total, 0.0) + zeroed


def triton_experts(device, weight_dtype: str) -> bool:
    """Whether vLLM runs the experts through its Triton fused MoE, where the masked rows apply: BF16/FP16/FP8
    weights on a GPU without FP4 tensor cores (no NVFP4 GEMM fit); on SM100 its FP8 MoE takes CUTLASS
    block-scaled grouped GEMMs or FlashInfer (vllm-0.11.0 wheel, quantization/fp8.py Fp8MoEMethod), and
    MXFP4 experts Marlin or matmul_ogs (quantization/mxfp4.py)."""
    if weight_dtype not in ("bf16", "fp16", "fp8"):
        return False
    try:
        device.regression("gemm", "nvfp4")
    except Exception:  # noqa: BLE001 - a profile without FP4 tensor cores
        return True
    return False
