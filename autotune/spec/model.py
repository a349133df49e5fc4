"""The model spec: a decoder-only transformer (or the FFN-only blocks of the seed's XXL problem)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.errors import require, require_choice, require_positive

__all__ = ["ModelSpec", "FFN_ACTIVATIONS", "LAYER_KINDS", "NORMS", "POSITION_EMBEDDINGS"]

FFN_ACTIVATIONS = ("gelu", "swiglu", "relu", "none")
LAYER_KINDS = ("decoder", "ffn_only")
NORMS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned", "rotary", "alibi", "none")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shape of a decoder-only transformer.

    ``ffn_activation="swiglu"`` means a gated FFN with three matrices (gate, up, down) of
    ``hidden_size x ffn_hidden_size``; the others use two. ``layer_kind="ffn_only"`` is the
    seed's XXL simplification: blocks of two linear layers, no attention, embeddings or head.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    ffn_activation: str
    vocab_size: int
    max_seq_len: int
    tied_embeddings: bool
    layer_kind: str = "decoder"
    norm: str = "layernorm"
    bias: bool = True
    dropout: bool = False
    position_embedding: str = "learned"
    source: str = ""

    def __post_init__(self) -> None:
        require(bool(self.name), "model.name", "must be a non-empty string")
        require_choice("model.layer_kind", self.layer_kind, LAYER_KINDS)
        require_choice("model.ffn_activation", self.ffn_activation, FFN_ACTIVATIONS)
        require_choice("model.norm", self.norm, NORMS)
        require_choice("model.position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        for field in ("num_layers", "hidden_size", "ffn_hidden_size", "max_seq_len"):
            require_positive(f"model.{field}", getattr(self, field))
        if self.layer_kind == "ffn_only":
            return
        require_positive("model.vocab_size", self.vocab_size)
        require_positive("model.num_heads", self.num_heads)
        require_positive("model.num_kv_heads", self.num_kv_heads)
        require(
            self.hidden_size % self.num_heads == 0,
            "model.num_heads",
            f"{self.num_heads} heads do not divide hidden_size {self.hidden_size}; "
            f"valid head counts divide {self.hidden_size}",
        )
        require(
            self.num_heads % self.num_kv_heads == 0,
            "model.num_kv_heads",
            f"{self.num_kv_heads} KV heads do not divide {self.num_heads} query heads",
        )

    @property
    def has_attention(self) -> bool:
        return self.layer_kind == "decoder"

    @property
    def has_embeddings(self) -> bool:
        """FFN-only models (the seed's XXL) omit the embedding and the output layer."""
        return self.layer_kind == "decoder"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads if self.has_attention else 0

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): ``num_kv_heads * head_dim``, smaller than hidden under GQA."""
        return self.num_kv_heads * self.head_dim if self.has_attention else 0

    def with_changes(self, **changes: object) -> "ModelSpec":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
