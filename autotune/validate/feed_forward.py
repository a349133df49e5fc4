"""The dense feed-forward block, used by dense layers and as the shared experts of MoE layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.spec.model import ModelSpec

__all__ = ["FeedForward"]


class FeedForward(nn.Module):
    """``w2(act(w1 x))``, or SwiGLU ``w2(silu(w1 x) * w3 x)`` (Shazeer 2020)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.activation = spec.ffn_activation
        self.w1 = nn.Linear(spec.hidden_size, spec.ffn_hidden_size, bias=spec.bias)
        self.w2 = nn.Linear(spec.ffn_hidden_size, spec.hidden_size, bias=spec.bias)
        self.w3 = nn.Linear(spec.hidden_size, spec.ffn_hidden_size, bias=spec.bias) if self.activation == "swiglu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = self.w1(x)
        if self.w3 is not None:
            up = F.silu(up) * self.w3(x)
        elif self.activation == "gelu":
            up = F.gelu(up)
        elif self.activation == "relu":
            up = F.relu(up)
        return self.w2(up)
