"""Rows the routed experts' grouped GEMMs compute in a serving step, tile padding included.

A grouped GEMM runs one GEMM per expert over the rows routed to it, and each CTA computes a whole
tile of rows: an expert that gets ``x`` rows costs ``ceil(x / T) T`` rows of FLOPs (its weights are
read once whatever ``x`` is; cost/serving_step.py prices those by the experts reached). Under
uniform routing each of the ``E`` experts gets ``X ~ Binomial(n, k / E)`` of a step's ``n`` tokens
(a token picks ``k`` distinct experts), so the rows computed are ``E x E[ceil(X / T) T]`` against
the ``n k`` a single GEMM of all routed rows would do. At many rows per expert the ratio tends to
1 + (T - 1) / (2 n k / E); at a few it is up to ``T`` times.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.expert_loads import skewed_row_share
from autotune.errors import require

__all__ = ["EXPERT_TILE_ROWS", "expert_tile_rows", "padded_row_share", "TRTLLM_GEN_TILES", "trtllm_gen_tile_rows",
           "expert_row_share"]

# The fewest rows one tile of the MoE grouped GEMM computes (its M tile on the token dimension).
# TensorRT-LLM's CUTLASS MoE GEMMs (cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/
# moe_gemm_template_dispatch_tma_ws.h @01a5e6ed, are_tile_shapes_supported_sm100; cutlass_extensions
# gemm_configs.h CutlassTileConfigSM90): Hopper CTA tiles have M 64 or 128, Blackwell tiles M 64 or
# 128 and FP4 operands M 128 only. vLLM's and SGLang's Triton fused_moe pad each expert's rows to
# the config's BLOCK_SIZE_M (moe_align_block_size) the same way. The smallest tile bounds the
# padding from below (the engines' autotuners pick a larger tile only where it is faster).
EXPERT_TILE_ROWS = {"nvfp4": 128, "default": 64}

# TensorRT-LLM's TRTLLMGenFusedMoE (moe_config backend TRTLLM, Blackwell) sizes its token tile per step:
# tokens per expert n k / E under balanced routing, times an imbalance factor of 1.3, to the next power
# of two, clamped to the 8..64 its batched-GEMM kernels support (_torch/modules/fused_moe/
# fused_moe_trtllm_gen.py _get_tile_tokens_dim; FlashInfer's trtllm_fp4_block_scale_moe the same rule).
TRTLLM_GEN_TILES = (8, 64)
TRTLLM_GEN_IMBALANCE = 1.3

_GRID_POINTS = 256  # token counts the expectation is evaluated at; linear interpolation between them


def expert_tile_rows(rate_dtype: str) -> int:
    """The M tile of the expert GEMMs run at ``rate_dtype``'s tensor-core rate."""
    return EXPERT_TILE_ROWS.get(rate_dtype, EXPERT_TILE_ROWS["default"])


def _padded_rows(n: int, p: float, tile: int) -> float:
    """E[ceil(X / tile) tile] for X ~ Binomial(n, p): tile x sum over j >= 0 of P(X > j tile)."""
    if n <= 0:
        return 0.0
    mean, sd = n * p, np.sqrt(n * p * (1.0 - p))
    top = int(min(n, mean + 12.0 * sd + tile + 1))
    x = np.arange(top + 1, dtype=float)
    steps = np.log(np.maximum(n - x[:-1], 1e-300)) - np.log(x[:-1] + 1.0) + np.log(p / (1.0 - p))
    log_pmf = n * np.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    pmf = np.exp(log_pmf - log_pmf.max())
    pmf /= pmf.sum()
    return float((np.ceil(x / tile) * tile * pmf).sum())


def padded_row_share(tokens: np.ndarray, num_experts: int, top_k: int, tile: int) -> np.ndarray:
    """For each step size in ``tokens``: rows the experts' tiles compute over the ``n k`` routed rows (>= 1; 1 at n = 0)."""
    require(1 <= top_k < num_experts, "num_experts_per_token", f"must be in [1, {num_experts}), got {top_k}")
    require(tile >= 1, "tile", f"must be >= 1, got {tile}")
    tokens = np.asarray(tokens, dtype=float)
    top = float(max(tokens.max(initial=1.0), 1.0))
    grid = np.unique(np.round(np.geomspace(1.0, top, _GRID_POINTS)))
    p = top_k / num_experts
    share = np.array([num_experts * _padded_rows(int(n), p, tile) / (n * top_k) for n in grid])
    return np.where(tokens > 0, np.interp(np.maximum(tokens, 1.0), grid, share), 1.0)


def trtllm_gen_tile_rows(tokens: np.ndarray, num_experts: int, top_k: int) -> np.ndarray:
    """The token tile TRTLLMGenFusedMoE runs a step of ``tokens`` with (TRTLLM_GEN_TILES)."""
    per_expert = np.floor(np.floor(np.asarray(tokens, dtype=float) * top_k / num_experts) * TRTLLM_GEN_IMBALANCE)
    power = 2.0 ** np.ceil(np.log2(np.maximum(per_expert, 1.0)))
    return np.clip(power, *TRTLLM_GEN_TILES)


def expert_row_share(tokens: np.ndarray, num_experts: int, top_k: int, rate_dtype: str, moe_backend: str = "",
                     alpha: float = 0.0) -> np.ndarray:
    """``padded_row_share`` at the tile the engine's MoE kernels take: the fixed M tile of the grouped
    GEMMs (expert_tile_rows), or TRTLLMGenFusedMoE's per-step token tile (moe_backend "trtllm");
    ``alpha`` > 1: under power-law expert loads of that exponent (cost/expert_loads.py) instead of uniform."""
    tokens = np.asarray(tokens, dtype=float)

    def share_at(rows: np.ndarray, tile: int) -> np.ndarray:
        if alpha > 1.0:
            return skewed_row_share(rows, num_experts, top_k, tile, alpha)
        return padded_row_share(rows, num_experts, top_k, tile)

    if moe_backend != "trtllm":
        return share_at(tokens, expert_tile_rows(rate_dtype))
    tiles, share = trtllm_gen_tile_rows(tokens, num_experts, top_k), np.ones_like(tokens)
    for tile in np.unique(tiles):
        chosen = tiles == tile
        share[chosen] = share_at(tokens[chosen], int(tile))
    return share
