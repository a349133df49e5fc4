"""The model spec: a decoder-only transformer (or the FFN-only blocks of the seed's XXL problem)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.errors import require, require_choice, require_positive
from autotune.spec.limits import check_limit

__all__ = ["ModelSpec", "FFN_ACTIVATIONS", "LAYER_KINDS", "NORMS", "POSITION_EMBEDDINGS", "ROUTERS"]

FFN_ACTIVATIONS = ("gelu", "swiglu", "relu", "none")
LAYER_KINDS = ("decoder", "ffn_only")
NORMS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned", "rotary", "alibi", "none")
# How a token's experts are chosen: softmax over all experts then top-k (Switch, Qwen-MoE),
# top-k logits then softmax over those (Mixtral), sigmoid scores with top-k (DeepSeek-V3).
ROUTERS = ("softmax_topk", "topk_softmax", "sigmoid_topk")


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
    # Attention details (0 / None: the plain default). head_dim_size 0 means hidden / heads.
    head_dim_size: int = 0
    qkv_bias: bool | None = None  # None: follows ``bias``
    attn_out_bias: bool | None = None  # None: follows ``bias``
    ffn_bias: bool | None = None  # None: follows ``bias``
    sliding_window: int = 0  # tokens each query sees on windowed layers (0: full attention)
    sliding_window_every: int = 1  # every n-th layer is windowed (Gemma 2 alternates: 2)
    rope_theta: float = 10000.0
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0 means not MLA.
    q_lora_rank: int = 0  # 0: queries projected directly (no low-rank query path)
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Mixture of experts (num_experts 0: dense). Widths are per expert.
    num_experts: int = 0
    num_experts_per_token: int = 0  # top-k
    expert_ffn_hidden_size: int = 0
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0  # width of each shared expert
    first_k_dense_layers: int = 0  # the first k layers keep a dense FFN (DeepSeek)
    moe_layer_frequency: int = 1  # after those, every n-th layer is MoE
    router: str = "softmax_topk"

    def __post_init__(self) -> None:
        require(bool(self.name), "model.name", "must be a non-empty string")
        require_choice("model.layer_kind", self.layer_kind, LAYER_KINDS)
        require_choice("model.ffn_activation", self.ffn_activation, FFN_ACTIVATIONS)
        require_choice("model.norm", self.norm, NORMS)
        require_choice("model.position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        for field in ("num_layers", "hidden_size", "ffn_hidden_size", "max_seq_len"):
            require_positive(f"model.{field}", getattr(self, field))
        check_limit("model.num_layers", self.num_layers, "num_layers")
        for field in ("hidden_size", "ffn_hidden_size"):
            check_limit(f"model.{field}", getattr(self, field), "width")
        check_limit("model.vocab_size", self.vocab_size, "vocab_size")
        self._check_moe()
        if self.layer_kind == "ffn_only":
            return
        require_positive("model.vocab_size", self.vocab_size)
        require_positive("model.num_heads", self.num_heads)
        require_positive("model.num_kv_heads", self.num_kv_heads)
        require(
            self.head_dim_size > 0 or self.kv_lora_rank > 0 or self.hidden_size % self.num_heads == 0,
            "model.num_heads",
            f"{self.num_heads} heads do not divide hidden_size {self.hidden_size}; "
            f"valid head counts divide {self.hidden_size}",
        )
        require(
            self.num_heads % self.num_kv_heads == 0,
            "model.num_kv_heads",
            f"{self.num_kv_heads} KV heads do not divide {self.num_heads} query heads",
        )

    def _check_moe(self) -> None:
        require_choice("model.router", self.router, ROUTERS)
        for field in ("num_experts", "num_experts_per_token", "expert_ffn_hidden_size", "num_shared_experts",
                      "shared_expert_ffn_hidden_size", "first_k_dense_layers", "head_dim_size", "sliding_window",
                      "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            value = getattr(self, field)
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 0, f"model.{field}",
                    f"must be a non-negative integer, got {value!r}")
        require_positive("model.moe_layer_frequency", self.moe_layer_frequency)
        require_positive("model.sliding_window_every", self.sliding_window_every)
        if self.num_experts == 0:
            require(self.num_experts_per_token == 0 and self.num_shared_experts == 0, "model.num_experts",
                    "a dense model (num_experts 0) has no top-k or shared experts; set num_experts > 0")
            return
        require(1 <= self.num_experts_per_token <= self.num_experts, "model.num_experts_per_token",
                f"top-k must be between 1 and num_experts {self.num_experts}, got {self.num_experts_per_token}")
        require_positive("model.expert_ffn_hidden_size", self.expert_ffn_hidden_size)
        require(self.num_shared_experts == 0 or self.shared_expert_ffn_hidden_size > 0,
                "model.shared_expert_ffn_hidden_size", "must be > 0 when num_shared_experts > 0")
        require(self.first_k_dense_layers < self.num_layers, "model.first_k_dense_layers",
                f"must be below num_layers {self.num_layers}, got {self.first_k_dense_layers}")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Layer ``layer`` (0-based) has routed experts: past the first-k dense ones, every n-th."""
        if not self.is_moe or layer < self.first_k_dense_layers:
            return False
        return (layer - self.first_k_dense_layers) % self.moe_layer_frequency == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    def is_windowed_layer(self, layer: int) -> bool:
        """Layer ``layer`` uses sliding-window attention."""
        return self.sliding_window > 0 and layer % self.sliding_window_every == 0

    @property
    def has_attention(self) -> bool:
        return self.layer_kind == "decoder"

    @property
    def has_embeddings(self) -> bool:
        """FFN-only models (the seed's XXL) omit the embedding and the output layer."""
        return self.layer_kind == "decoder"

    @property
    def head_dim(self) -> int:
        if not self.has_attention:
            return 0
        return self.head_dim_size or self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): ``num_kv_heads * head_dim``, smaller than hidden under GQA."""
        return self.num_kv_heads * self.head_dim if self.has_attention else 0

    def with_changes(self, **changes: object) -> "ModelSpec":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
