"""The model families of Hugging Face ``transformers``, by ``model_type``: which config keys set
which :class:`ModelSpec` fields, with each family's defaults as its config class sets them and
its layers as its modelling code builds them (transformers 4.51 to 5.x)."""

from __future__ import annotations

import math
from collections.abc import Callable

from autotune.errors import AutotuneError
from autotune.spec.hf_reader import ConfigReader

__all__ = ["FAMILIES", "HF_ACTIVATIONS", "common_fields", "check_groups", "check_moe", "moe_layer_pattern", "window_pattern", "windowed_layers"]

Fields = dict[str, object]


# The activation names transformers' models look up in ACT2FN (transformers 5.24 activations.py
# ACT2CLS); any other name is a KeyError when transformers builds the model.
HF_ACTIVATIONS = ("gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
                  "gelu_pytorch_tanh", "hardswish", "laplace", "leaky_relu", "linear", "mish", "prelu", "quick_gelu",
                  "relu", "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "xielu")


def _activation(r: ConfigReader, *keys: str, default: str, gated: bool) -> str:
    """The spec's FFN activation for the config's (one of HF_ACTIVATIONS): gated FFNs are priced
    as SwiGLU or GeGLU, the others as GELU or ReLU (an elementwise kernel either way)."""
    name = r.str(*keys, default=default, choices=HF_ACTIVATIONS)
    if gated:
        return "geglu" if name.startswith("gelu") else "swiglu"
    return "relu" if name == "relu" else "gelu"


def _rope_theta(r: ConfigReader, default: float = 10000.0) -> float:
    """``rope_theta`` (transformers 4.x) or ``rope_parameters.rope_theta`` (5.x)."""
    nested = r.nested("rope_parameters")
    if nested.has("rope_theta"):
        return nested.float("rope_theta", default=default, positive=True)
    return r.float("rope_theta", default=default, positive=True)


def window_pattern(r: ConfigReader, num_layers: int, *, every: int = 1, default: int = 0) -> Fields:
    """Sliding-window attention: ``layer_types`` (5.x) when present, else ``sliding_window`` on
    every ``every``-th layer (``default`` when the key is absent, 0 when it is null). Patterns the
    spec cannot express are refused."""
    window = r.int("sliding_window", default=0 if "sliding_window" in r.data else default)
    types = r.layer_types(num_layers)
    if types is None or not window:
        return {"sliding_window": window, "sliding_window_every": every if window else 1}
    windowed = [i for i, kind in enumerate(types[:num_layers]) if kind == "sliding_attention"]
    return windowed_layers(windowed, num_layers, window)


def windowed_layers(windowed: list[int], num_layers: int, window: int) -> Fields:
    """The spec's window fields for a sorted list of windowed layers: every n-th from layer 0
    (sliding_window_every), or all but every n-th, 1-based (full_attention_every: Gemma 3's 5
    local to 1 global, Llama 4's 3 chunked to 1 full). The first two windowed layers, or the
    first full one, say which n it can be: one comparison, not one per n."""
    if not windowed:
        return {"sliding_window": 0}
    every = windowed[1] - windowed[0] if len(windowed) > 1 else num_layers  # [0] alone: every num_layers-th
    if windowed == list(range(0, num_layers, every)):
        return {"sliding_window": window, "sliding_window_every": every}
    full = sorted(set(range(num_layers)) - set(windowed))
    every = full[0] + 1 if full else 0
    if every >= 2 and windowed == [i for i in range(num_layers) if (i + 1) % every]:
        return {"sliding_window": window, "full_attention_every": every}
    raise AutotuneError("config.layer_types", "windowed layers must be every n-th layer from layer 0, or all but every "
                        f"n-th; got layers {_listed(windowed)}")


def _listed(layers: list[int]) -> str:
    return str(layers) if len(layers) <= 12 else f"{str(layers[:12])[:-1]}, ... ({len(layers)} layers)]"


def moe_layer_pattern(moe_layers: list[int], num_layers: int) -> Fields:
    """The spec's (first_k_dense_layers, moe_layer_frequency, mlp_only_layers) for a sorted list
    of MoE layers: the frequency that needs the fewest extra dense layers listed. A frequency
    covers every MoE layer when it divides each one's distance from the first, so the greatest
    common divisor of those distances is the one with the fewest extras (one MoE layer alone:
    every num_layers-th)."""
    if not moe_layers:
        return {"num_experts": 0}
    first = moe_layers[0]
    freq = 0
    for layer in moe_layers:
        freq = math.gcd(freq, layer - first)
    freq = freq or num_layers
    extra = sorted(set(range(first, num_layers, freq)) - set(moe_layers))
    return {"first_k_dense_layers": first, "moe_layer_frequency": freq, "mlp_only_layers": tuple(extra)}


def check_moe(r: ConfigReader, experts_key: str, experts: int, top_k: int) -> None:
    if experts and not top_k:
        raise AutotuneError("config.num_experts_per_tok", f"{experts} experts ({experts_key}) need top-k > 0")
    if experts and top_k > experts:
        raise AutotuneError("config.num_experts_per_tok",
                            f"top-k {top_k} is larger than the {experts} experts of {experts_key}; valid: 1..{experts}")
    if not experts and top_k and r.has("num_experts_per_tok"):
        raise AutotuneError("config.num_experts_per_tok", f"top-k {top_k} given, but {experts_key} is 0 (a dense model)")


def common_fields(r: ConfigReader, *, tied: bool = False, head_dim: int | None = None) -> Fields:
    """Keys shared by the Llama-style families (RMSNorm, RoPE, gated FFN, no biases)."""
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    explicit = r.int("head_dim", default=head_dim or 0)
    layers = r.int("num_hidden_layers")
    r.layer_types(layers)  # checked as transformers checks it, also where the family reads no windows
    return {
        "num_layers": layers, "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": r.int("num_key_value_heads", default=heads),
        "head_dim_size": explicit if explicit and explicit * heads != hidden else 0,
        "ffn_hidden_size": r.int("intermediate_size"),
        "ffn_activation": _activation(r, "hidden_activation", "hidden_act", default="silu", gated=True),
        "vocab_size": r.int("vocab_size"), "max_seq_len": r.int("max_position_embeddings", default=2048),
        "tied_embeddings": r.bool("tie_word_embeddings", tied), "norm": "rmsnorm", "bias": False,
        "position_embedding": "rotary", "rope_theta": _rope_theta(r),
    }


def _llama(r: ConfigReader) -> Fields:
    f = common_fields(r)
    return {**f, "qkv_bias": r.bool("attention_bias", False), "attn_out_bias": r.bool("attention_bias", False),
            "ffn_bias": r.bool("mlp_bias", False)}


def _mistral(r: ConfigReader) -> Fields:
    f = common_fields(r)
    return {**f, **window_pattern(r, f["num_layers"], default=4096)}  # MistralConfig's default window


def _mixtral(r: ConfigReader) -> Fields:
    f = common_fields(r)
    experts, top_k = r.int("num_local_experts", "num_experts", default=8), r.int("num_experts_per_tok", default=2)
    check_moe(r, "num_local_experts", experts, top_k)
    return {**f, **window_pattern(r, f["num_layers"]), "num_experts": experts, "num_experts_per_token": top_k,
            "expert_ffn_hidden_size": f["ffn_hidden_size"] if experts else 0}


def _qwen_windows(r: ConfigReader, num_layers: int) -> Fields:
    """Qwen 2/3: sliding windows only with use_sliding_window, on layers from max_window_layers on."""
    if not r.bool("use_sliding_window", False):
        return {"sliding_window": 0}
    if r.layer_types(num_layers) is not None:
        return window_pattern(r, num_layers)
    start = r.int("max_window_layers", default=num_layers)
    if start >= num_layers:
        return {"sliding_window": 0}
    if start == 0:
        return window_pattern(r, num_layers)
    raise AutotuneError("config.max_window_layers", f"sliding windows on layers {start}.. only are not supported; "
                        "supported: on all layers (0) or none")


def _qwen_moe(r: ConfigReader, f: Fields, *, shared: bool) -> Fields:
    # Qwen2MoeConfig / Qwen3MoeConfig defaults: 60 / 128 experts, top-4 / top-8, width 1408 / 768
    experts = r.int("num_experts", "num_local_experts", default=60 if shared else 128)
    top_k = r.int("num_experts_per_tok", default=4 if shared else 8)
    check_moe(r, "num_experts", experts, top_k)
    step = r.int("decoder_sparse_step", default=1)
    if step < 1:
        raise AutotuneError("config.decoder_sparse_step", f"must be >= 1, got {step}")
    dense = set(r.int_list("mlp_only_layers"))
    n = f["num_layers"]
    moe = [i for i in range(n) if experts and i not in dense and (i + 1) % step == 0]
    out: Fields = {"num_experts": 0} if not moe else {
        "num_experts": experts, "num_experts_per_token": top_k,
        "expert_ffn_hidden_size": r.int("moe_intermediate_size", default=1408 if shared else 768),
        **moe_layer_pattern(moe, n)}
    width = r.int("shared_expert_intermediate_size", default=5632) if shared else 0
    if moe and width:
        out.update(num_shared_experts=1, shared_expert_ffn_hidden_size=width, shared_expert_gate=True)
    return out


def _qwen2(r: ConfigReader, *, moe: bool = False) -> Fields:
    f = common_fields(r)
    bias = r.bool("qkv_bias", True)  # Qwen2 hard-codes QKV biases; Qwen2-MoE reads qkv_bias (default true)
    extra = _qwen_moe(r, f, shared=True) if moe else {}
    return {**f, **_qwen_windows(r, f["num_layers"]), "qkv_bias": bias, "attn_out_bias": False, **extra}


def _qwen3(r: ConfigReader, *, moe: bool = False) -> Fields:
    f = common_fields(r, head_dim=None if moe else 128)  # Qwen3Config defaults head_dim to 128
    bias = r.bool("attention_bias", False)
    extra = _qwen_moe(r, f, shared=False) if moe else {}
    return {**f, **_qwen_windows(r, f["num_layers"]), "qkv_bias": bias, "attn_out_bias": bias, "qk_norm": "head",
            **extra}


def _olmoe(r: ConfigReader) -> Fields:
    f = common_fields(r)
    experts, top_k = r.int("num_experts", "num_local_experts", default=64), r.int("num_experts_per_tok", default=8)
    check_moe(r, "num_experts", experts, top_k)
    bias = r.bool("attention_bias", False)
    return {**f, "qkv_bias": bias, "attn_out_bias": bias, "qk_norm": "full", "num_experts": experts,
            "num_experts_per_token": top_k, "expert_ffn_hidden_size": f["ffn_hidden_size"] if experts else 0}


def _gemma(r: ConfigReader, *, version: int = 1) -> Fields:
    f = common_fields(r, tied=True, head_dim=256)  # GemmaConfig defaults head_dim to 256
    bias = r.bool("attention_bias", False)
    f.update(qkv_bias=bias, attn_out_bias=bias)
    if version == 2:  # sandwich norms; even layers windowed (Gemma 2 report, sec. 2)
        f.update(norms_per_layer=4, **window_pattern(r, f["num_layers"], every=2, default=4096))
    return f


def _phi3(r: ConfigReader) -> Fields:
    f = common_fields(r)  # fused qkv_proj and gate_up_proj: the same parameters as separate ones
    return {**f, **window_pattern(r, f["num_layers"])}


def _deepseek(r: ConfigReader, *, version: int) -> Fields:
    f = common_fields(r)
    heads = f["num_heads"]
    bias = r.bool("attention_bias", False)
    f.update(num_kv_heads=heads, head_dim_size=0, qkv_bias=bias, attn_out_bias=bias,
             # q_lora_rank null (DeepSeek-V2-Lite): queries projected directly; absent: the class default
             q_lora_rank=0 if "q_lora_rank" in r.data and r.data["q_lora_rank"] is None
             else r.int("q_lora_rank", default=1536), kv_lora_rank=r.int("kv_lora_rank", default=512),
             qk_rope_head_dim=r.int("qk_rope_head_dim", default=64),
             qk_nope_head_dim=r.int("qk_nope_head_dim", default=128), v_head_dim=r.int("v_head_dim", default=128))
    experts = r.int("n_routed_experts", default=256 if version == 3 else 64)
    top_k = r.int("num_experts_per_tok", default=8 if version == 3 else 0)
    check_moe(r, "n_routed_experts", experts, top_k)
    check_groups(r, experts, top_k)
    first_k = r.int("first_k_dense_replace", default=3 if version == 3 else 0)
    freq = r.int("moe_layer_freq", default=1)
    if freq < 1:
        raise AutotuneError("config.moe_layer_freq", f"must be >= 1, got {freq}")
    n = f["num_layers"]
    # DeepSeek's own code: MoE from first_k_dense_replace on, where layer % moe_layer_freq == 0.
    moe = [i for i in range(n) if experts and i >= first_k and i % freq == 0]
    if not moe:
        return {**f, "num_experts": 0}
    shared = r.int("n_shared_experts", default=1 if version == 3 else 2)
    width = r.int("moe_intermediate_size", default=2048 if version == 3 else 1407)
    return {**f, "num_experts": experts, "num_experts_per_token": top_k, "expert_ffn_hidden_size": width,
            "num_shared_experts": shared, "shared_expert_ffn_hidden_size": width if shared else 0,
            **moe_layer_pattern(moe, n)}  # the router: hf_rope_router.py


def check_groups(r: ConfigReader, experts: int, top_k: int) -> None:
    """Group-limited routing (DeepSeek-V3): experts split into n_group groups, topk_group chosen."""
    groups, chosen = r.int("n_group", default=0), r.int("topk_group", default=0)
    if groups and experts % groups:
        raise AutotuneError("config.n_group", f"{groups} groups do not divide the {experts} routed experts")
    if groups and chosen > groups:
        raise AutotuneError("config.topk_group", f"{chosen} groups chosen of only {groups} (n_group)")
    if groups and chosen and top_k > chosen * (experts // groups):
        raise AutotuneError("config.num_experts_per_tok", f"top-k {top_k} exceeds the {chosen * (experts // groups)} "
                            "experts of the topk_group groups a token may use")


def _gpt2(r: ConfigReader) -> Fields:
    hidden = r.int("n_embd", "hidden_size")
    return {
        "num_layers": r.int("n_layer", "num_hidden_layers"), "hidden_size": hidden,
        "num_heads": r.int("n_head", "num_attention_heads"), "num_kv_heads": r.int("n_head", "num_attention_heads"),
        "ffn_hidden_size": r.int("n_inner", default=4 * hidden),
        "ffn_activation": _activation(r, "activation_function", default="gelu_new", gated=False),
        "vocab_size": r.int("vocab_size"), "max_seq_len": r.int("n_positions", "n_ctx", default=1024),
        "tied_embeddings": r.bool("tie_word_embeddings", True), "position_embedding": "learned",
        # GPT-2's residual dropout (transformers GPT2Config resid_pdrop, default 0.1)
        "dropout": r.float("resid_pdrop", default=0.1) > 0,
    }


def _gpt_neox(r: ConfigReader) -> Fields:
    heads = r.int("num_attention_heads")
    bias = r.bool("attention_bias", True)
    return {
        "num_layers": r.int("num_hidden_layers"), "hidden_size": r.int("hidden_size"), "num_heads": heads,
        "num_kv_heads": heads, "ffn_hidden_size": r.int("intermediate_size"),
        "ffn_activation": _activation(r, "hidden_act", default="gelu", gated=False),
        "vocab_size": r.int("vocab_size"), "max_seq_len": r.int("max_position_embeddings", default=2048),
        "tied_embeddings": r.bool("tie_word_embeddings", False), "position_embedding": "rotary",
        "qkv_bias": bias, "attn_out_bias": bias, "ffn_bias": True, "rope_theta": _rope_theta(r),
    }


def _bloom(r: ConfigReader) -> Fields:
    hidden, heads = r.int("hidden_size", "n_embed"), r.int("n_head", "num_attention_heads")
    return {
        "num_layers": r.int("n_layer", "num_hidden_layers"), "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": heads, "ffn_hidden_size": 4 * hidden, "ffn_activation": "gelu",
        "vocab_size": r.int("vocab_size"), "max_seq_len": r.int("seq_length", default=2048),  # ALiBi: no limit
        "tied_embeddings": r.bool("tie_word_embeddings", True), "position_embedding": "alibi",
        "embedding_norm": True,
    }


def _falcon(r: ConfigReader) -> Fields:
    hidden, heads = r.int("hidden_size"), r.int("num_attention_heads", "n_head")
    new_arch = r.bool("new_decoder_architecture", False)
    if new_arch:
        kv_heads = r.int("num_kv_heads", default=heads)
    else:
        kv_heads = 1 if r.bool("multi_query", True) else heads
    parallel = r.bool("parallel_attn", True)
    norms = 2 if not parallel or (new_arch and r.int("num_ln_in_parallel_attn", default=2) == 2) else 1
    return {
        "num_layers": r.int("num_hidden_layers", "n_layer"), "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": kv_heads, "ffn_hidden_size": r.int("ffn_hidden_size", default=4 * hidden),
        "ffn_activation": _activation(r, "activation", default="gelu", gated=False),
        "vocab_size": r.int("vocab_size"), "max_seq_len": r.int("max_position_embeddings", default=2048),
        "tied_embeddings": r.bool("tie_word_embeddings", True), "bias": r.bool("bias", False),
        "position_embedding": "alibi" if r.bool("alibi", False) else "rotary", "norms_per_layer": norms,
        "rope_theta": _rope_theta(r),
    }


FAMILIES: dict[str, Callable[[ConfigReader], Fields]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral,
    "qwen2": _qwen2, "qwen2_moe": lambda r: _qwen2(r, moe=True),
    "qwen3": _qwen3, "qwen3_moe": lambda r: _qwen3(r, moe=True),
    "deepseek_v2": lambda r: _deepseek(r, version=2), "deepseek_v3": lambda r: _deepseek(r, version=3),
    "gemma": _gemma, "gemma2": lambda r: _gemma(r, version=2), "phi3": _phi3, "olmoe": _olmoe,
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "bloom": _bloom, "falcon": _falcon,
}
