"""Tile padding of an expert-TP MoE layer's grouped GEMMs when routing is skewed.

Every engine's MoE kernel pads each expert's rows to its M tile (cost/expert_tiles.py: Triton fused_moe's
moe_align_block_size to BLOCK_SIZE_M in vLLM and SGLang, CUTLASS grouped GEMM tiles in TensorRT-LLM,
TRTLLM-Gen's token tile). expert_tiles prices that padding for uniform routing (a binomial count per
expert). A trained MoE's routing is skewed: aiconfigurator prices MoE layers at power-law expert loads
(docs/POWER_LAW_DISTRIBUTION.md @095f58a5: alpha 1.01 for DeepSeek-V3/R1, 1.2 for the other MoEs, the
exponents cost/moe_skew.py takes), drawn by collector/helper.py ``_generate_power_law_distribution``:
E samples of x^-alpha on [1, 0.8 n] (on [0.01, 2] where n k <= E), scaled to the n k routed rows and
rounded, capped at n an expert, the shortfall added one row at a time to the least loaded expert and
an excess taken from the most loaded (``_round_robin_adjust_per_rank``). Under expert TP (one rank
group holding every expert) the layer computes every expert's padded rows, so its rows over n k are
the mean over draws of sum_e ceil(r_e / T) T / (n k). Skew leaves more experts with a few rows (a
whole tile for them). The draw also reaches fewer experts at small n; serving_experts keeps uniform
routing's reach for the weights read (docs/serving.md, "Expert TP pads the skewed experts' rows").
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.errors import require

__all__ = ["power_law_rows", "skewed_row_share"]

_DRAWS = 32  # expert loads averaged (fixed seed); aiconfigurator's collector times 5 draws a shape
_GRID = 2.0 ** np.arange(0.0, 20.5, 0.5)  # token counts the share is drawn at, interpolated in log-log between


def power_law_rows(tokens: int, num_experts: int, top_k: int, alpha: float, u: np.ndarray) -> np.ndarray:
    """Rows per expert (draws x E integers summing to tokens x top_k) of the collector's power-law draw
    from the uniform variates ``u`` (draws x E)."""
    n, total = int(tokens), int(tokens) * top_k
    lo, hi = (1.0, 0.8 * n) if total > num_experts else (0.01, 2.0)  # the collector's two ranges
    x = ((hi ** (1 - alpha) - lo ** (1 - alpha)) * u + lo ** (1 - alpha)) ** (1 / (1 - alpha))
    rows = np.minimum(np.round(x / x.sum(axis=1, keepdims=True) * total), n)  # an expert takes a token once
    return np.array([_level(draw, total - int(draw.sum()), n) for draw in rows])


def _level(rows: np.ndarray, short: int, cap: int) -> np.ndarray:
    """The collector's one-row-at-a-time fill of the least loaded expert (``short`` > 0, up to ``cap``)
    or trim of the most loaded (< 0), done at once: the rows levelled to the water line it reaches."""
    if short == 0:
        return rows
    sign = 1.0 if short > 0 else -1.0
    r = sign * rows  # a trim of the largest is a fill of the smallest of -rows
    top = float(cap) if short > 0 else 0.0  # a fill stops at the cap, a trim at no rows

    def moved(line: float) -> float:
        return float(np.clip(line - r, 0.0, None).sum())

    lo, hi = float(r.min()), top
    while hi - lo > 1:  # the highest whole line the shortfall fills to
        mid = np.floor((lo + hi) / 2)
        lo, hi = (mid, hi) if moved(mid) <= abs(short) else (lo, mid)
    line = hi if moved(hi) <= abs(short) else lo
    left = abs(short) - int(moved(line))  # fewer than the experts on the line: one more row to some
    r = np.maximum(r, line)
    r[np.flatnonzero(r == line)[:left]] += 1.0
    return sign * r


@lru_cache(maxsize=64)
def _share_curve(num_experts: int, top_k: int, tile: int, alpha: float) -> np.ndarray:
    """Mean over _DRAWS of the padded rows over the routed rows, at each _GRID token count."""
    u = np.random.default_rng(0).random((_DRAWS, num_experts))
    out = []
    for n in _GRID:
        rows = power_law_rows(int(n), num_experts, top_k, alpha, u)
        out.append(float((np.ceil(rows / tile) * tile).sum(axis=1).mean() / (n * top_k)))
    return np.array(out)


def skewed_row_share(tokens: np.ndarray, num_experts: int, top_k: int, tile: int, alpha: float) -> np.ndarray:
    """For each step size in ``tokens``: rows the experts' tiles compute over the ``n k`` routed rows under
    power-law loads of exponent ``alpha`` (>= 1; 1 at n = 0), the counterpart of padded_row_share."""
    require(1 <= top_k < num_experts, "num_experts_per_token", f"must be in [1, {num_experts}), got {top_k}")
    require(tile >= 1 and alpha > 1.0, "tile", f"needs tile >= 1 and alpha > 1, got {tile}, {alpha}")
    tokens = np.asarray(tokens, dtype=float)
    curve = _share_curve(num_experts, top_k, int(tile), float(alpha))
    share = np.exp(np.interp(np.log2(np.maximum(tokens, 1.0)), np.log2(_GRID), np.log(curve)))
    return np.where(tokens > 0, np.maximum(share, 1.0), 1.0)
