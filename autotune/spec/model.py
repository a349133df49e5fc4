"""The model spec: a decoder-only transformer (or the FFN-only blocks of the seed's XXL problem)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from autotune.errors import require, require_choice, require_positive
from autotune.spec.limits import check_limit

__all__ = ["ModelSpec", "FFN_ACTIVATIONS", "GATED_ACTIVATIONS", "LAYER_KINDS", "NORMS", "POSITION_EMBEDDINGS",
           "QK_NORMS", "ROPE_SCALINGS", "ROUTERS", "WINDOW_KINDS", "MAX_NAME_CHARS"]

# A model's name goes into run directory names (YYYYMMDD-HHMMSS-NAME-GPUS), which file systems
# cap at 255 bytes; Hugging Face hub ids are at most 96 characters a part (huggingface_hub's REPO_ID_REGEX)
MAX_NAME_CHARS = 128

# swiglu and geglu (Gemma) are gated: three matrices (gate, up, down); the others two.
FFN_ACTIVATIONS = ("gelu", "swiglu", "geglu", "relu", "none")
GATED_ACTIVATIONS = ("swiglu", "geglu")
LAYER_KINDS = ("decoder", "ffn_only")
NORMS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned", "rotary", "alibi", "none")
# How a token's experts are chosen and weighted: softmax over all experts then top-k, the k
# probabilities kept as they are (Switch, DeepSeek-V2, Qwen-MoE/OLMoE with norm_topk_prob false);
# top-k logits then softmax over those, i.e. the top-k probabilities renormalised to sum to 1
# (Mixtral, Qwen3-MoE/OLMoE with norm_topk_prob true); sigmoid scores, top-k, renormalised
# (DeepSeek-V3); top-k logits, each weight the sigmoid of its own logit, not renormalised, scaling
# the expert's input (Llama 4: transformers' Llama4Router and Llama4TextMoe.forward). Each is then
# scaled by ``router_scaling_factor``.
ROUTERS = ("softmax_topk", "topk_softmax", "sigmoid_topk", "topk_sigmoid")
# RoPE frequency scaling for long context (transformers' rope_scaling / rope_parameters rope_type):
# position interpolation ("linear", Chen et al. 2023), Llama 3.1's band-wise "llama3", YaRN
# (Peng et al. 2023, DeepSeek-V2/V3).
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn")
# Norms of queries and keys before RoPE: none, one per head of head_dim (Qwen3), over the whole
# projection width (OLMoE), or a per-head L2 norm without weights (Llama 4's Llama4TextL2Norm).
QK_NORMS = ("none", "head", "full", "l2")
# What a windowed layer's query sees: the last ``sliding_window`` positions (Mistral, Gemma 2/3,
# GPT-OSS), or its own chunk of ``sliding_window`` positions from the last multiple of it (Llama 4's
# attention_chunk_size; transformers' create_chunked_causal_mask).
WINDOW_KINDS = ("sliding", "chunked")


# The spec/limits.py bound each integer field keeps (the rest: heads, head dims, ranks, experts and
# widths, "width"): a count beyond any real model is a typo, refused before any work.
_SIZE_BOUNDS = {"num_layers": "num_layers", "first_k_dense_layers": "num_layers", "moe_layer_frequency": "num_layers",
                "sliding_window_every": "num_layers", "full_attention_every": "num_layers", "vocab_size": "vocab_size",
                "max_seq_len": "seq_len", "sliding_window": "seq_len", "rope_original_max_positions": "seq_len"}


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shape of a decoder-only transformer.

    ``ffn_activation="swiglu"`` (or ``"geglu"``) means a gated FFN with three matrices (gate, up,
    down) of ``hidden_size x ffn_hidden_size``; the others use two. MoE layers replace the dense
    FFN by ``num_experts`` experts of ``expert_ffn_hidden_size`` (same activation) and a router.
    ``layer_kind="ffn_only"`` is the seed's XXL simplification: blocks of two linear layers, no
    attention, embeddings or head. ``num_parameters()`` counts what ``transformers`` builds.
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
    full_attention_every: int = 0  # else: every n-th layer (1-based n, 2n, ...) full, the rest windowed (Gemma 3: 6)
    window_kind: str = "sliding"  # one of WINDOW_KINDS
    attention_sinks: bool = False  # a learned logit per head joins each softmax (GPT-OSS's sinks)
    rope_theta: float = 10000.0
    rope_scaling: str = "none"  # one of ROPE_SCALINGS
    rope_scaling_factor: float = 1.0  # context extension factor
    rope_original_max_positions: int = 0  # the pre-training context the scaling extends (llama3, yarn)
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths above original/low are divided by the factor
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths below original/high are kept
    rope_beta_fast: float = 32.0  # yarn: the ramp's bounds in rotations
    rope_beta_slow: float = 1.0
    rope_mscale: float = 1.0  # yarn: attention temperature coefficients (DeepSeek's mscale, mscale_all_dim)
    rope_mscale_all_dim: float = 0.0
    rope_yarn_truncate: bool = True  # yarn: correction range rounded to integers (GPT-OSS: false)
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
    router_scaling_factor: float = 1.0  # routed weights times this (DeepSeek's routed_scaling_factor)
    router_groups: int = 0  # group-limited routing: experts in this many groups (DeepSeek n_group; 0: off)
    router_group_topk: int = 0  # groups a token's experts may come from (DeepSeek topk_group)
    router_expert_bias: bool = False  # aux-loss-free balancing bias added to the scores for selection only
    router_bias: bool = False  # the router's linear layer has a bias, a parameter per expert (GPT-OSS)
    mlp_only_layers: tuple[int, ...] = ()  # further layers that keep a dense FFN (Qwen-MoE mlp_only_layers)
    shared_expert_gate: bool = False  # a sigmoid gate (hidden -> 1) scales the shared expert (Qwen2-MoE)
    expert_act_clamp: float = 0.0  # the routed experts' gated-activation inputs clamped at +-this (GPT-OSS 7; 0: none)
    # Norm details that change the parameter count.
    qk_norm: str = "none"
    norms_per_layer: int = 2  # 1: Falcon-7B's parallel block shares one; 4: Gemma 2's sandwich norms
    embedding_norm: bool = False  # a norm right after the token embedding (BLOOM)
    # Its FP8 release scales weights per 128x128 block (config.json quantization_config weight_block_size),
    # so engines run block-scale GEMMs on it (cost/serving_gemm_fits.py serving_cluster); False: per-tensor scales.
    fp8_block_scaled: bool = False
    # Its NVFP4 release quantizes the attention output projection too (NVIDIA's DeepSeek -FP4-v2 checkpoints:
    # "additionally quantizes the wo module in attention layers", cost/checkpoint_layout.py); False: BF16 there.
    nvfp4_out_proj: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.mlp_only_layers, list):  # from TOML or JSON
            object.__setattr__(self, "mlp_only_layers", tuple(self.mlp_only_layers))
        require(isinstance(self.name, str) and 0 < len(self.name) <= MAX_NAME_CHARS, "model.name",
                f"must be a string of 1 to {MAX_NAME_CHARS} characters (it names run directories), got {self.name!r:.80}")
        self._check_numbers()
        require_choice("model.layer_kind", self.layer_kind, LAYER_KINDS)
        require_choice("model.ffn_activation", self.ffn_activation, FFN_ACTIVATIONS)
        require(isinstance(self.fp8_block_scaled, bool), "model.fp8_block_scaled", f"must be true or false, got {self.fp8_block_scaled!r}")
        require(isinstance(self.nvfp4_out_proj, bool), "model.nvfp4_out_proj", f"must be true or false, got {self.nvfp4_out_proj!r}")
        require_choice("model.norm", self.norm, NORMS)
        require_choice("model.position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        require_choice("model.qk_norm", self.qk_norm, QK_NORMS)
        require(self.norms_per_layer in (1, 2, 4), "model.norms_per_layer",
                f"must be 1 (parallel block), 2 (pre-norm) or 4 (sandwich), got {self.norms_per_layer!r}")
        for field in ("num_layers", "hidden_size", "ffn_hidden_size", "max_seq_len"):
            require_positive(f"model.{field}", getattr(self, field))
        check_limit("model.num_layers", self.num_layers, "num_layers")
        for field in ("hidden_size", "ffn_hidden_size"):
            check_limit(f"model.{field}", getattr(self, field), "width")
        check_limit("model.vocab_size", self.vocab_size, "vocab_size")
        self._check_moe()
        self._check_rope()
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

    def _check_numbers(self) -> None:
        """Every float field finite (a number, not a string); every int field an integer."""
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.type == "float":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                require(ok, f"model.{spec.name}", f"must be a finite number, got {value!r:.60}")
            elif spec.type == "int":
                require(isinstance(value, int) and not isinstance(value, bool), f"model.{spec.name}",
                        f"must be an integer, got {value!r:.60}")
                check_limit(f"model.{spec.name}", value, _SIZE_BOUNDS.get(spec.name, "width"))
            elif spec.type == "bool":
                require(isinstance(value, bool), f"model.{spec.name}", f"must be True or False, got {value!r:.60}")

    def _check_rope(self) -> None:
        require_choice("model.rope_scaling", self.rope_scaling, ROPE_SCALINGS)
        require_positive("model.rope_theta", self.rope_theta, integer=False)
        if self.rope_scaling == "none":
            return
        require(self.rope_scaling_factor >= 1.0, "model.rope_scaling_factor",
                f"must be >= 1 (a context extension), got {self.rope_scaling_factor!r}")
        if self.rope_scaling == "llama3":
            # equal factors leave no smoothed band (transformers' _compute_llama3_parameters masks it out)
            require(self.rope_high_freq_factor >= self.rope_low_freq_factor > 0, "model.rope_high_freq_factor",
                    f"must be at least rope_low_freq_factor > 0, got {self.rope_high_freq_factor!r} and "
                    f"{self.rope_low_freq_factor!r}")
        if self.rope_scaling in ("llama3", "yarn"):
            require_positive("model.rope_original_max_positions", self.rope_original_max_positions)

    def _check_moe(self) -> None:
        require_choice("model.router", self.router, ROUTERS)
        require(isinstance(self.router_scaling_factor, (int, float)) and self.router_scaling_factor > 0,
                "model.router_scaling_factor", f"must be > 0, got {self.router_scaling_factor!r}")
        for field in ("router_groups", "router_group_topk"):
            value = getattr(self, field)
            require(isinstance(value, int) and value >= 0, f"model.{field}", f"must be >= 0, got {value!r}")
        if self.router_groups:
            require(self.num_experts % self.router_groups == 0 and 1 <= self.router_group_topk <= self.router_groups,
                    "model.router_groups", f"{self.router_groups} groups must divide the {self.num_experts} experts "
                    f"and router_group_topk ({self.router_group_topk}) be 1..{self.router_groups}")
        for field in ("num_experts", "num_experts_per_token", "expert_ffn_hidden_size", "num_shared_experts",
                      "shared_expert_ffn_hidden_size", "first_k_dense_layers", "head_dim_size", "sliding_window",
                      "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            value = getattr(self, field)
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 0, f"model.{field}",
                    f"must be a non-negative integer, got {value!r}")
        require_positive("model.moe_layer_frequency", self.moe_layer_frequency)
        require(isinstance(self.expert_act_clamp, (int, float)) and self.expert_act_clamp >= 0, "model.expert_act_clamp",
                f"must be >= 0 (0: no clamp), got {self.expert_act_clamp!r}")
        require(isinstance(self.mlp_only_layers, tuple)
                and all(isinstance(i, int) and 0 <= i < self.num_layers for i in self.mlp_only_layers),
                "model.mlp_only_layers", f"must list layer indices in 0..{self.num_layers - 1}, got {self.mlp_only_layers!r}")
        if self.kv_lora_rank:
            require(self.qk_rope_head_dim > 0 and self.qk_nope_head_dim > 0 and self.v_head_dim > 0,
                    "model.kv_lora_rank", "latent attention needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim > 0")
        else:
            require(self.q_lora_rank == 0, "model.q_lora_rank", "a low-rank query path needs kv_lora_rank > 0 (MLA)")
        self._check_windows()
        if self.num_experts == 0:
            require(self.num_experts_per_token == 0 and self.num_shared_experts == 0 and not self.shared_expert_gate,
                    "model.num_experts",
                    "a dense model (num_experts 0) has no top-k or shared experts; set num_experts > 0")
            return
        require(1 <= self.num_experts_per_token <= self.num_experts, "model.num_experts_per_token",
                f"top-k must be between 1 and num_experts {self.num_experts}, got {self.num_experts_per_token}")
        require_positive("model.expert_ffn_hidden_size", self.expert_ffn_hidden_size)
        require(self.num_shared_experts == 0 or self.shared_expert_ffn_hidden_size > 0,
                "model.shared_expert_ffn_hidden_size", "must be > 0 when num_shared_experts > 0")
        require(self.first_k_dense_layers < self.num_layers, "model.first_k_dense_layers",
                f"must be below num_layers {self.num_layers}, got {self.first_k_dense_layers}")

    def _check_windows(self) -> None:
        require_positive("model.sliding_window_every", self.sliding_window_every)
        require_choice("model.window_kind", self.window_kind, WINDOW_KINDS)
        every = self.full_attention_every
        require(isinstance(every, int) and not isinstance(every, bool) and (every == 0 or every >= 2),
                "model.full_attention_every", f"must be 0 (unused) or >= 2, got {every!r}")
        require(not every or self.sliding_window_every == 1, "model.full_attention_every",
                f"set either it or sliding_window_every, got {every} and {self.sliding_window_every}")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Layer ``layer`` (0-based) has routed experts: past the first-k dense ones, every n-th."""
        if not self.is_moe or layer < self.first_k_dense_layers or layer in self.mlp_only_layers:
            return False
        return (layer - self.first_k_dense_layers) % self.moe_layer_frequency == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    def is_windowed_layer(self, layer: int) -> bool:
        """Layer ``layer`` (0-based) uses windowed attention: every ``sliding_window_every``-th from
        layer 0, or all but every ``full_attention_every``-th (1-based)."""
        if self.full_attention_every:
            return self.sliding_window > 0 and (layer + 1) % self.full_attention_every != 0
        return self.sliding_window > 0 and layer % self.sliding_window_every == 0

    @property
    def windowed_share(self) -> float:
        """The share of the layers that attend through a window."""
        return sum(self.is_windowed_layer(i) for i in range(self.num_layers)) / self.num_layers

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
        if self.is_mla and not self.head_dim_size:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim_size or self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): ``num_kv_heads * head_dim``, smaller than hidden under GQA."""
        return self.num_kv_heads * self.head_dim if self.has_attention else 0

    @property
    def is_gated_ffn(self) -> bool:
        return self.ffn_activation in GATED_ACTIVATIONS

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head: nope + rope parts under MLA, else head_dim."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_head_width(self) -> int:
        """Width of one value head (MLA's v_head_dim, else head_dim)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def q_width(self) -> int:
        """Width of all query heads (the QK^T contraction summed over heads)."""
        return self.num_heads * self.qk_head_dim if self.has_attention else 0

    @property
    def attn_out_width(self) -> int:
        """Width of the attention output, the input of the output projection."""
        return self.num_heads * self.v_head_width if self.has_attention else 0

    def kv_cache_elements_per_token_per_layer(self) -> int:
        """Elements one token keeps in one layer's KV cache: the compressed latent and the shared
        rope key under MLA (DeepSeek-V2 paper, sec. 2.1.2, Table 1: (d_c + d_h^R) per layer), else
        K and V of every KV head (GQA/MQA shrink it; Ainslie et al. 2023)."""
        if not self.has_attention:
            return 0
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def cached_positions(self, context_len: float) -> float:
        """Positions one layer's KV cache holds for a sequence of ``context_len``, averaged over
        the layers: a windowed layer keeps the last ``sliding_window`` only (Mistral 7B's rolling
        buffer cache, Jiang et al. 2023, sec. 2); a chunked one as many (transformers 5.x
        cache_utils.py gives chunked_attention layers a sliding-window cache of attention_chunk_size)."""
        if not self.sliding_window:
            return float(context_len)
        windowed = self.windowed_share
        return (1.0 - windowed) * context_len + windowed * min(context_len, self.sliding_window)

    def kv_cache_shards(self, tp: int) -> int:
        """Ways tensor parallelism splits the KV cache: by KV heads, except MLA's latent, which
        every head reads, so each TP rank keeps all of it (SGLang's data-parallel attention for
        DeepSeek, LMSYS blog 2024-12, exists to avoid that duplication)."""
        return 1 if self.is_mla else tp

    def num_parameters(self) -> int:
        """All parameters, as ``transformers`` counts them (tied embeddings once)."""
        from autotune.spec.params import parameter_count

        return parameter_count(self)

    def num_active_parameters(self) -> int:
        """Parameters one token uses: routed experts count top-k of num_experts."""
        from autotune.spec.params import parameter_count

        return parameter_count(self, active=True)

    def with_changes(self, **changes: object) -> "ModelSpec":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
