"""The reference transformer in PyTorch: the architecture a :class:`ModelSpec` describes.

Its structure follows torchtitan's Llama (``tok_embeddings``, optional ``pos_embeddings``,
``layers`` as an ``nn.ModuleDict`` of :class:`TransformerBlock` with ``attention_norm``,
``attention{wq,wk,wv,wo}``, ``ffn_norm``, ``feed_forward{w1,w2,[w3]}``, then ``norm`` and
``output``), so tensor-parallel plans map onto ``ColwiseParallel``/``RowwiseParallel``/
``SequenceParallel`` by name and a pipeline stage is the model with layers deleted and the
embedding or head set to ``None``. Attention reshapes to ``-1`` heads, so it runs unchanged on
the local heads of a tensor-parallel shard.

``build_model(spec, device="meta")`` constructs without memory (for tracing); call
:meth:`Transformer.init_weights` after ``to_empty``. Weights are initialised from a seeded
generator in a fixed parameter order, so every parallel layout starts from the same numbers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from autotune.errors import require, require_choice
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import ATTENTION_IMPLS
from autotune.validate.feed_forward import FeedForward
from autotune.validate.moe_model import MoEFeedForward

__all__ = ["Transformer", "TransformerBlock", "Attention", "FeedForward", "build_model", "DEFAULT_DROPOUT_P",
           "ROPE_THETA"]

# GPT-3 trains with dropout 0.1 (Brown et al. 2020, sec. 2.1 follows GPT-2); ModelSpec.dropout is a flag.
DEFAULT_DROPOUT_P = 0.1
# Rotary base frequency of RoFormer (Su et al. 2021, eq. 15) and Llama 1/2.
ROPE_THETA = 10000.0
# GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layers) (Radford et al. 2019).
INIT_STD = 0.02


def _norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(spec.hidden_size, eps=1e-5)
    return nn.LayerNorm(spec.hidden_size, eps=1e-5)  # with its bias, as the operator graph counts it


def rotary_tables(head_dim: int, max_seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(max_seq_len, head_dim/2) unit complex numbers e^(i * position * frequency)."""
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, device=device, dtype=torch.float32), inv_freq)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of ``x`` (batch, seq, heads, head_dim) by their positions' angles: one
    complex multiplication (as torchtitan does), a single pass over ``x`` on a CPU."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * table[: x.shape[1], None, :]).flatten(-2).type_as(x)


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads; ``impl`` "flash" uses SDPA, "unfused" softmax,
    "unfused_eager_mask" Megatron-LM 2019's scaled Q and K and multiplied-in mask."""

    def __init__(self, spec: ModelSpec, impl: str, dropout_p: float) -> None:
        super().__init__()
        self.head_dim = spec.head_dim
        self.impl = impl
        self.dropout_p = dropout_p
        self.recompute_core = False  # selective recomputation of the s x s part (Korthikanti et al. 2022)
        self.wq = nn.Linear(spec.hidden_size, spec.hidden_size, bias=spec.bias)
        self.wk = nn.Linear(spec.hidden_size, spec.kv_dim, bias=spec.bias)
        self.wv = nn.Linear(spec.hidden_size, spec.kv_dim, bias=spec.bias)
        self.wo = nn.Linear(spec.hidden_size, spec.hidden_size, bias=spec.bias)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        batch, seq = x.shape[:2]
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        if rope is not None:
            q, k = apply_rotary(q, rope), apply_rotary(k, rope)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            out = self._core(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = self.dropout_p if self.training else 0.0
        if self.impl == "flash":
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True,
                                                  enable_gqa=k.shape[1] != q.shape[1])
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        seq = q.shape[-2]
        if self.impl == "unfused_eager_mask":  # Megatron-LM 2019 (spec.workload.ATTENTION_IMPLS)
            root = math.sqrt(math.sqrt(self.head_dim))
            keep = torch.ones(seq, seq, dtype=q.dtype, device=q.device).tril()
            scores = torch.mul((q / root) @ (k / root).transpose(-2, -1), keep) - 10000.0 * (1.0 - keep)
            return F.dropout(scores.softmax(-1), p) @ v
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        probs = F.dropout(scores.masked_fill(causal, float("-inf")).softmax(-1), p)
        return probs @ v


class TransformerBlock(nn.Module):
    """Pre-norm block; an ``ffn_only`` block (the seed's XXL) is its feed-forward alone."""

    def __init__(self, spec: ModelSpec, attention_impl: str, dropout_p: float, layer: int = 0) -> None:
        super().__init__()
        self.has_attention = spec.has_attention
        if self.has_attention:
            self.attention_norm = _norm(spec)
            self.attention = Attention(spec, attention_impl, dropout_p)
            self.ffn_norm = _norm(spec)
        if spec.is_moe_layer(layer):  # routed experts (validate/moe_model.py)
            self.feed_forward = MoEFeedForward(spec)
        else:
            self.feed_forward = FeedForward(spec)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None = None) -> torch.Tensor:
        if not self.has_attention:
            return self.feed_forward(x)
        h = x + self.dropout(self.attention(self.attention_norm(x), rope))
        return h + self.dropout(self.feed_forward(self.ffn_norm(h)))


class Transformer(nn.Module):
    """Decoder-only transformer; a pipeline stage sets the parts it does not hold to ``None``.

    ``forward`` takes token ids (or hidden states on a later stage, or for ``ffn_only``
    models) and returns logits (or hidden states where there is no ``output``).
    """

    def __init__(self, spec: ModelSpec, attention_impl: str, dropout_p: float) -> None:
        super().__init__()
        self.spec = spec
        has_emb = spec.has_embeddings
        self.tok_embeddings = nn.Embedding(spec.vocab_size, spec.hidden_size) if has_emb else None
        learned = has_emb and spec.position_embedding == "learned"
        self.pos_embeddings = nn.Embedding(spec.max_seq_len, spec.hidden_size) if learned else None
        self.emb_dropout = nn.Dropout(dropout_p)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(spec, attention_impl, dropout_p, i)
                                     for i in range(spec.num_layers)})
        self.norm = _norm(spec) if has_emb else None
        self.output = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False) if has_emb else None
        self._tie()
        rotary = spec.has_attention and spec.position_embedding == "rotary"
        table = rotary_tables(spec.head_dim, spec.max_seq_len) if rotary else None
        self.register_buffer("rope", table, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = tokens
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(tokens)
            if self.pos_embeddings is not None:
                h = h + self.pos_embeddings(torch.arange(tokens.shape[1], device=tokens.device))
            h = self.emb_dropout(h)
        for layer in self.layers.values():
            h = layer(h, self.rope)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h

    def _init_std(self, name: str, param: torch.Tensor, residual_std: float) -> float:
        if not self.spec.has_attention:  # no residual path or norms: LeCun's 1/sqrt(fan_in) keeps the scale
            return 1.0 / math.sqrt(param.shape[-1])
        return residual_std if name.endswith(("wo.weight", "w2.weight", "experts_w2")) else INIT_STD

    def _tie(self) -> None:
        if self.spec.tied_embeddings and self.tok_embeddings is not None and self.output is not None:
            self.output.weight = self.tok_embeddings.weight

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Deterministic initialisation (also after ``to_empty`` from the meta device, which
        unties shared parameters: they are tied again first)."""
        self._tie()
        # drawn on the weights' device: a GPU run initialises there (no CPU pass over every
        # weight); ranks and the reference run on one device type draw the same numbers
        device = next(self.parameters()).device
        gen = torch.Generator(device=device).manual_seed(seed)
        residual_std = INIT_STD / math.sqrt(2 * self.spec.num_layers)
        for name, param in self.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif "norm" in name:
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen, device=device) * self._init_std(name, param, residual_std))
        if self.rope is not None:
            self.rope = rotary_tables(self.spec.head_dim, self.spec.max_seq_len, device=self.rope.device)


def build_model(spec: ModelSpec, *, attention_impl: str = "flash", dropout_p: float | None = None,
                device: str | torch.device = "cpu", seed: int = 0) -> Transformer:
    """The reference transformer of ``spec`` in fp32 on ``device`` ("meta": shapes only, no init).

    ``dropout_p`` defaults to :data:`DEFAULT_DROPOUT_P` when ``spec.dropout`` is set, else 0.
    """
    require_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
    require(spec.position_embedding in ("learned", "rotary", "none") or not spec.has_attention,
            "model.position_embedding",
            f"{spec.position_embedding!r} is not in the reference model; it has learned, rotary or none")
    p = (DEFAULT_DROPOUT_P if spec.dropout else 0.0) if dropout_p is None else float(dropout_p)
    require(0.0 <= p < 1.0, "dropout_p", f"must be in [0, 1), got {p}")
    with torch.device(device):
        model = Transformer(spec, attention_impl, p)
    if torch.device(device).type != "meta":
        model.init_weights(seed)
    return model
