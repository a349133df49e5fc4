"""How much more routed work the busiest expert-parallel rank takes than the mean: a serving step's
MoE layer ends when its busiest EP rank's experts do.

Routing of a trained MoE is not uniform. TensorRT-LLM tech blog 4 (docs/source/blogs/tech_blog/
blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md, Table 1) measured DeepSeek-R1 at EP32 on GB200 (a
machine translation dataset, no EPLB): the hottest rank receives 1.564 times more routed tokens than the
mean (max / mean 2.564, averaged over layers and iterations; per-rank std 491.6 at a mean of 1,024).
NVIDIA's aiconfigurator prices MoE layers at power-law expert loads whose exponent it estimated by
matching observed latency (docs/POWER_LAW_DISTRIBUTION.md @095f58a5, "Alpha Parameter Guide"): alpha
1.01 for DeepSeek-V3/R1 and 1.2 for Qwen3-235B on CNN-DailyMail / OpenOrca; its model classes apply 1.01
to the DeepSeek family and 1.2 to every other MoE (sdk/models/deepseek.py and moe.py
``_power_law_alpha``). Its collector draws the loads so (collector/helper.py
``_generate_power_law_distribution``): E samples of x^-alpha on [1, 0.8 n] (n tokens, n k > E), scaled to
the n k routed rows, each expert capped at n, experts split over the ranks in order, the fullest rank
timed. That draw at alpha 1.01, 256 experts, top-8, EP32 and the blog's 1,024 rows a rank (n = 4,096)
gives max / mean 2.56: the blog's measurement. So the rule here: alpha 1.01 for a model with DeepSeek's
group-limited routing (n_group / topk_group), else 1.2, at any dataset (the only measured figures are
real text; random-token prompts are not reported to route more evenly, and fake-data training runs are
reported to skew more: PrimeIntellect-ai/prime-rl PR #2368).

An expert-parallel load balancer (redundant experts placed by measured loads: DeepSeek's EPLB, SGLang's
``--enable-eplb`` / ``--ep-num-redundant-experts``, TensorRT-LLM's ``moe_config.load_balancer``) leaves
the busiest rank 0.109-0.115 above the mean (the same Table 1: 9 slots a rank at EP32, 8 at EP36), so a
deployment running one is priced at that residue (1.115) where the unbalanced draw is above it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.errors import require
from autotune.spec.model import ModelSpec

__all__ = ["routing_alpha", "busiest_rank_skew", "DEEPSEEK_ALPHA", "OTHER_MOE_ALPHA", "EPLB_SKEW"]

DEEPSEEK_ALPHA = 1.01  # aiconfigurator docs/POWER_LAW_DISTRIBUTION.md @095f58a5: DeepSeek-V3/R1, latency-matched
OTHER_MOE_ALPHA = 1.2  # same source: Qwen3-235B, "typical production"; its generic MOEModel's _power_law_alpha
EPLB_SKEW = 1.115  # TensorRT-LLM tech blog 4 Table 1: imbalance ratio 0.115 with EPLB (8 slots a rank, EP36)
_DRAWS = 256  # expert placements averaged (fixed seed): the mean max / mean settles within 1% by then
_GRID = 2.0 ** np.arange(0, 21)  # token counts the skew is drawn at, interpolated in log between


def routing_alpha(model: ModelSpec) -> float:
    """The power-law exponent of the model's expert loads: DeepSeek's group-limited routing 1.01, else 1.2."""
    require(model.is_moe, "model", f"{model.name} has no experts to route to")
    return DEEPSEEK_ALPHA if model.router_groups else OTHER_MOE_ALPHA


@lru_cache(maxsize=64)
def _skew_curve(num_experts: int, topk: int, ep: int, alpha: float) -> np.ndarray:
    """Mean over _DRAWS of the fullest rank's rows over the mean rank's, at each _GRID token count."""
    rng = np.random.default_rng(0)
    sizes = [len(chunk) for chunk in np.array_split(np.arange(num_experts), ep)]
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    u = rng.random((_DRAWS, num_experts))
    out = []
    for n in _GRID:
        lo, hi = (1.0, 0.8 * n) if n * topk > num_experts else (0.01, 2.0)  # the collector's two ranges
        x = ((hi ** (1 - alpha) - lo ** (1 - alpha)) * u + lo ** (1 - alpha)) ** (1 / (1 - alpha))
        rows = np.minimum(x / x.sum(axis=1, keepdims=True) * n * topk, n)  # an expert takes a token once
        for _ in range(3):  # the rows past the cap go to the experts below it, as the collector spreads them
            free = rows < n
            short = n * topk - rows.sum(axis=1, keepdims=True)
            rows = np.minimum(rows + free * rows * short / np.maximum((rows * free).sum(axis=1, keepdims=True), 1e-9), n)
        # experts over the ranks in order, as evenly as they split (redundant slots aside: 256 over 72 ranks)
        ranks = np.add.reduceat(rows, starts, axis=1)
        out.append(float((ranks.max(axis=1) / ranks.mean(axis=1)).mean()))
    return np.array(out)


def busiest_rank_skew(model: ModelSpec, ep: int, tokens, *, eplb: bool = False) -> np.ndarray:
    """The busiest of ``ep`` expert-parallel ranks' routed rows over the mean rank's, for a step of
    ``tokens`` tokens (array); 1 without expert parallelism; at most EPLB_SKEW under a load balancer."""
    tokens = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    if ep <= 1:
        return np.ones_like(tokens)
    require(ep <= model.num_experts, "ep", f"ep={ep} exceeds the {model.num_experts} experts")
    curve = _skew_curve(model.num_experts, model.num_experts_per_token, ep, routing_alpha(model))
    skew = np.interp(np.log2(tokens), np.log2(_GRID), curve)
    return np.minimum(skew, EPLB_SKEW) if eplb else skew
