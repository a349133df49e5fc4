"""The positions a serving step's attention reaches on a model with windowed layers.

A windowed layer's query attends to the last ``W`` positions (a sliding window: GPT-OSS's alternate
layers, W = 128; Gemma 2/3; Mistral v0.1) or to its own chunk of ``W`` positions (Llama 4's chunked
local attention, W = 8192), and the fused kernels skip the key blocks outside it: FlashAttention-3
starts a local query block's key loop at (query index - window_size_left) / kBlockN and, with an
attention chunk, no earlier than the chunk's start (Dao-AILab/flash-attention @0f25c7b7
hopper/block.h BlockMN::get_n_block_min_max), which vLLM's FlashAttention backend calls with
window_size = (sliding_window - 1, 0) (v1/attention/backends/flash_attn.py, the 0.10.2 wheel). So a
decode on such a layer reads min(context, W) cached positions (or the positions of its chunk so far)
and a prompt chunk scores that many keys a query; the step model's per-position and per-pair costs
(cost/serving_attention.py) are a layer's, and this module gives the simulator the positions and pairs
averaged over the layers. The kernels' key-block granularity (up to one kBlockN block more at the
window's edge) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.errors import require

__all__ = ["AttentionWindow", "NO_WINDOW", "model_window"]


@dataclass(frozen=True, kw_only=True)
class AttentionWindow:
    """``share`` of the layers attend through a window of ``tokens`` positions (``chunked``: Llama 4's
    chunks instead of a sliding window); share 0: every layer attends to the whole context."""

    share: float = 0.0
    tokens: int = 0
    chunked: bool = False

    def __post_init__(self) -> None:
        require(0.0 <= self.share <= 1.0, "window.share", f"must be in [0, 1], got {self.share!r}")
        require(self.share == 0.0 or (isinstance(self.tokens, int) and self.tokens >= 1), "window.tokens",
                f"must be a whole number >= 1 where share > 0, got {self.tokens!r}")

    def positions(self, context: np.ndarray) -> float:
        """Cached positions the decodes of requests holding ``context`` tokens each (this step's
        included) read, summed over the requests and averaged over the layers."""
        context = np.asarray(context, dtype=float)
        if not self.share:
            return float(context.sum())
        return float(((1.0 - self.share) * context + self.share * self._seen(context)).sum())

    def growing(self, context: np.ndarray) -> float:
        """How many positions ``positions`` gains a step as each of those decodes adds one token: every
        request on the full layers; on the windowed ones only those inside their first window (sliding)
        or, chunked, all of them (a chunk's wrap, once every ``tokens`` steps, left out)."""
        context = np.asarray(context, dtype=float)
        if not self.share or self.chunked:
            return float(len(context))
        return float((1.0 - self.share) * len(context) + self.share * np.count_nonzero(context < self.tokens))

    def pairs(self, done: np.ndarray, takes: np.ndarray) -> np.ndarray:
        """Query-key pairs of prompt chunks of ``takes`` tokens after ``done`` cached ones, one per chunk,
        averaged over the layers: on a full layer the query at position p (1-based) scores p keys; on a
        windowed one min(p, W), or its position inside its chunk."""
        done, takes = np.asarray(done, dtype=float), np.asarray(takes, dtype=float)
        full = takes * (done + (takes + 1.0) / 2.0)
        if not self.share:
            return full
        windowed = self._seen_sum(done + takes) - self._seen_sum(done)
        return (1.0 - self.share) * full + self.share * windowed

    def _seen(self, position: np.ndarray) -> np.ndarray:
        """Keys the query at 1-based ``position`` scores on a windowed layer."""
        w = float(self.tokens)
        return np.mod(position - 1.0, w) + 1.0 if self.chunked else np.minimum(position, w)

    def _seen_sum(self, n: np.ndarray) -> np.ndarray:
        """Sum of _seen over positions 1..n."""
        w = float(self.tokens)
        if self.chunked:
            whole, rest = np.floor(n / w), np.mod(n, w)
            return whole * w * (w + 1.0) / 2.0 + rest * (rest + 1.0) / 2.0
        inside = np.minimum(n, w)
        return inside * (inside + 1.0) / 2.0 + w * np.maximum(n - w, 0.0)


NO_WINDOW = AttentionWindow()


def model_window(model) -> AttentionWindow:
    """The model's windowed layers as AttentionWindow (NO_WINDOW for full attention everywhere)."""
    if not model.sliding_window or not model.windowed_share:
        return NO_WINDOW
    return AttentionWindow(share=model.windowed_share, tokens=int(model.sliding_window),
                           chunked=model.window_kind == "chunked")
