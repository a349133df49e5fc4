"""The 2025 families of Hugging Face ``transformers``: GPT-OSS, Llama 4 and Gemma 3.

Their config classes' defaults (transformers 5.24 models/*/configuration_*.py, quoted in
``_DEFAULTS``) fill the keys a config.json leaves out: the hub's files are written as differences
from them (google/gemma-3-27b-it's text_config lists eight keys and no vocab_size). The
multimodal wrappers (model_type ``llama4``, ``gemma3``) are read for their text model
(``text_config``): the vision tower and the projector are not counted nor priced.
"""

from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.spec.hf_families_moe import MOE_DEFAULTS
from autotune.spec.hf_families import check_moe, common_fields, moe_layer_pattern, window_pattern, windowed_layers
from autotune.spec.hf_reader import ConfigReader

__all__ = ["RECENT_FAMILIES", "WRAPPERS", "text_view"]

Fields = dict[str, object]

# The keys these families read, with their config class's default (transformers 5.24).
_DEFAULTS: dict[str, dict[str, object]] = {
    # GptOssConfig (configuration_gpt_oss.py); its rope_parameters default: yarn x32 over 4096, beta 32/1,
    # truncate false; layer_types default: sliding on even layers (i + 1) % 2
    "gpt_oss": {"num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088, "hidden_size": 2880,
                "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
                "sliding_window": 128, "tie_word_embeddings": False, "hidden_act": "silu",
                "max_position_embeddings": 131072, "num_experts_per_tok": 4, "swiglu_limit": 7.0,
                "attention_bias": True, "rope_theta": 150000.0,
                "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                 "truncate": False, "original_max_position_embeddings": 4096}},
    # Llama4TextConfig (configuration_llama4.py); default_theta 500000
    "llama4_text": {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
                    "max_position_embeddings": 4096 * 32, "tie_word_embeddings": False, "num_experts_per_tok": 1,
                    "num_local_experts": 16, "interleave_moe_layer_step": 1, "use_qk_norm": True,
                    "no_rope_layer_interval": 4, "attention_chunk_size": 8192, "attention_bias": False,
                    "rope_theta": 500000.0},
    # Gemma3TextConfig (configuration_gemma3.py); default_theta global 1e6 (local layers 10000)
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
                    "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "rope_theta": 1000000.0},
}
# Multimodal wrapper -> the model_type of its text_config (Llama4Config, Gemma3Config sub_configs).
WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text"}


def text_view(data: dict, model_type: str) -> dict:
    """The keys the family of ``model_type`` reads: a wrapper's text_config (its own
    tie_word_embeddings, else the wrapper's), over the config class's defaults; Gemma 3's RoPE
    per layer type (5.x rope_parameters) as its global layers' table."""
    family = WRAPPERS.get(model_type, model_type)
    defaults = _DEFAULTS.get(family) or MOE_DEFAULTS.get(family)
    if defaults is None:
        return data
    view = dict(data)
    if model_type in WRAPPERS:
        text = ConfigReader(data).dict("text_config")
        view = {**text}
        if text.get("tie_word_embeddings") is None and data.get("tie_word_embeddings") is not None:
            view["tie_word_embeddings"] = data["tie_word_embeddings"]
    view = {**defaults, **view}
    rope = view.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict):
        view["rope_parameters"] = rope["full_attention"]  # Gemma 3: local layers' base is rope_local_base_freq
    return view


def _gpt_oss(r: ConfigReader) -> Fields:
    """GptOssForCausalLM: biased attention with a learned sink per head, windows on every other
    layer from layer 0, every layer MoE with a biased router and biased experts (clamped SwiGLU)."""
    f = common_fields(r)
    experts, top_k = r.int("num_local_experts"), r.int("num_experts_per_tok")
    if not experts:
        raise AutotuneError("config.num_local_experts", "GPT-OSS builds an MoE on every layer; got 0 experts")
    check_moe(r, "num_local_experts", experts, top_k)
    clamp = r.float("swiglu_limit", default=7.0)
    if clamp < 0:
        raise AutotuneError("config.swiglu_limit", f"must be >= 0, got {clamp}")
    bias = r.bool("attention_bias", True)
    return {**f, **window_pattern(r, f["num_layers"], every=2), "bias": bias, "qkv_bias": bias, "attn_out_bias": bias,
            "attention_sinks": True, "ffn_bias": True, "num_experts": experts, "num_experts_per_token": top_k,
            "expert_ffn_hidden_size": f["ffn_hidden_size"], "router_bias": True, "expert_act_clamp": clamp}


def _llama4_rope_layers(r: ConfigReader, n: int) -> list[int]:
    """Layers with RoPE (no_rope_layers 1; default: all but every no_rope_layer_interval-th)."""
    flags = r.int_list("no_rope_layers")
    if not flags:  # Llama4TextConfig: an empty or absent list takes the interval's default
        interval = r.int("no_rope_layer_interval")
        if interval < 1:
            raise AutotuneError("config.no_rope_layer_interval", f"must be >= 1, got {interval}")
        return [i for i in range(n) if (i + 1) % interval]
    if len(flags) < n:
        raise AutotuneError("config.no_rope_layers", f"lists {len(flags)} layers, the model has {n}")
    return [i for i in range(n) if flags[i]]


def _llama4_windows(r: ConfigReader, n: int) -> Fields:
    """Chunked attention on the RoPE layers (layer_types chunked_attention when written), full
    attention on the NoPE ones."""
    chunk = r.int("attention_chunk_size", default=0)
    types = r.layer_types(n)
    if types is not None:
        chunked = [i for i, kind in enumerate(types[:n]) if kind == "chunked_attention"]
    else:
        chunked = _llama4_rope_layers(r, n) if chunk else []
    if chunked and not chunk:
        raise AutotuneError("config.attention_chunk_size", "chunked_attention layers need a chunk size, got null")
    return {**windowed_layers(chunked, n, chunk), "window_kind": "chunked"} if chunked else {"sliding_window": 0}


def _llama4_moe(r: ConfigReader, n: int, width: int) -> Fields:
    experts, top_k = r.int("num_local_experts"), r.int("num_experts_per_tok")
    check_moe(r, "num_local_experts", experts, top_k)
    step = r.int("interleave_moe_layer_step")
    if step < 1:
        raise AutotuneError("config.interleave_moe_layer_step", f"must be >= 1, got {step}")
    layers = r.int_list("moe_layers") if r.has("moe_layers") else list(range(step - 1, n, step))
    if any(not 0 <= i < n for i in layers):
        raise AutotuneError("config.moe_layers", f"must list layer indices in 0..{n - 1}, got {layers}")
    moe = sorted(set(layers)) if experts else []
    if not moe:
        return {"num_experts": 0}
    # Llama4TextMoe: routed experts and one shared expert, both of intermediate_size
    return {"num_experts": experts, "num_experts_per_token": top_k, "expert_ffn_hidden_size": width,
            "num_shared_experts": 1, "shared_expert_ffn_hidden_size": width, **moe_layer_pattern(moe, n)}


def _llama4(r: ConfigReader) -> Fields:
    """Llama4ForCausalLM: dense layers of intermediate_size_mlp, MoE layers of intermediate_size."""
    f = common_fields(r)
    n, bias = f["num_layers"], r.bool("attention_bias", False)
    # Llama4TextL2Norm on the RoPE layers only (use_qk_norm and use_rope)
    l2 = r.bool("use_qk_norm", True) and bool(_llama4_rope_layers(r, n))
    return {**f, "ffn_hidden_size": r.int("intermediate_size_mlp"), "qkv_bias": bias, "attn_out_bias": bias,
            "qk_norm": "l2" if l2 else "none", **_llama4_windows(r, n), **_llama4_moe(r, n, f["ffn_hidden_size"])}


def _gemma3(r: ConfigReader) -> Fields:
    """Gemma3ForCausalLM: Gemma 2's sandwich norms with per-head QK norms, windows on all but
    every sliding_window_pattern-th layer."""
    if r.bool("use_bidirectional_attention", False):
        raise AutotuneError("config.use_bidirectional_attention", "bidirectional Gemma 3 (an encoder) is not "
                                                                  "supported; autotune plans causal decoders")
    f = common_fields(r, tied=True)
    bias, n = r.bool("attention_bias", False), f["num_layers"]
    if r.layer_types(n) is not None:
        windows = window_pattern(r, n)
    else:
        pattern = r.int("sliding_window_pattern")
        if pattern < 1:
            raise AutotuneError("config.sliding_window_pattern", f"must be >= 1, got {pattern}")
        window = r.int("sliding_window", default=0)
        windows = windowed_layers([i for i in range(n) if (i + 1) % pattern], n, window) if window else {}
    return {**f, "qkv_bias": bias, "attn_out_bias": bias, "qk_norm": "head", "norms_per_layer": 4,
            "sliding_window": 0, **windows}


RECENT_FAMILIES = {"gpt_oss": _gpt_oss, "llama4": _llama4, "llama4_text": _llama4, "gemma3": _gemma3,
                   "gemma3_text": _gemma3}
