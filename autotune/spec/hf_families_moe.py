"""The sigmoid-routed MoE families of 2025 that are not DeepSeek's own ``model_type``: GLM-4.5,
-4.5-Air and -4.6 (``glm4_moe``), MiniMax-M2 (``minimax_m2``) and Kimi K2 (``kimi_k2``: DeepSeek-V3's
code, loaded by the checkpoint's auto_map; transformers 5.24 has no class of that name).

Their config classes' defaults (transformers 5.24 models/*/configuration_*.py, quoted in
``MOE_DEFAULTS``) fill the keys a config.json leaves out.

Both GLM-4.5 and MiniMax-M2 rotate only part of each head (``partial_rotary_factor`` 0.5;
MiniMax's ``rotary_dim`` 64 of head_dim 128): transformers' apply_rotary_pos_emb rotates
``q[..., :rotary_dim]`` and passes the rest through (modeling_glm4_moe.py, modeling_minimax_m2.py).
The spec keeps no field for it: the rotation is elementwise work the graph does not price as an
operator on any model, and it changes no projection or attention FLOP (QK^T still spans the whole
head_dim), so the fraction is checked, not stored.
"""

from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.spec.hf_families import FAMILIES as _BASE, check_groups, check_moe, common_fields, moe_layer_pattern
from autotune.spec.hf_reader import ConfigReader

__all__ = ["MOE_DEFAULTS", "MOE_FAMILIES"]

Fields = dict[str, object]

# The keys these families read, with their config class's default (transformers 5.24).
MOE_DEFAULTS: dict[str, dict[str, object]] = {
    # Glm4MoeConfig (configuration_glm4_moe.py): GLM-4.5-Air's sizes; no head_dim (hidden / heads),
    # no rope default (PreTrainedConfig's 10000); __post_init__ sets partial_rotary_factor 0.5
    "glm4_moe": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
                 "num_attention_heads": 96, "num_key_value_heads": 8, "hidden_act": "silu",
                 "max_position_embeddings": 131072, "tie_word_embeddings": False, "attention_bias": False,
                 "moe_intermediate_size": 1408, "num_experts_per_tok": 8, "n_shared_experts": 1,
                 "n_routed_experts": 128, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1,
                 "first_k_dense_replace": 1, "norm_topk_prob": True, "use_qk_norm": False,
                 "partial_rotary_factor": 0.5},
    # MiniMaxM2Config (configuration_minimax_m2.py): MiniMax-M2's sizes; default_theta 5e6
    "minimax_m2": {"vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
                   "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
                   "max_position_embeddings": 196608, "tie_word_embeddings": False, "num_experts_per_tok": 8,
                   "num_local_experts": 256, "rope_theta": 5000000.0},
}


def _rotary_fraction(r: ConfigReader, head_dim: int) -> float:
    """The share of each head RoPE rotates: partial_rotary_factor (in rope_parameters in 5.x), or
    MiniMax's rotary_dim / head_dim (MiniMaxM2Config.convert_rope_params_to_dict)."""
    nested = r.nested("rope_parameters")
    if nested.has("partial_rotary_factor"):
        fraction = nested.float("partial_rotary_factor", default=1.0, positive=True)
    elif r.has("rotary_dim"):
        fraction = r.int("rotary_dim") / head_dim
    else:
        fraction = r.float("partial_rotary_factor", default=1.0, positive=True)
    if not 0 < fraction <= 1 or int(head_dim * fraction) < 2:
        raise AutotuneError("config.partial_rotary_factor", f"RoPE must turn 2..{head_dim} of the head's "
                                                            f"{head_dim} dims (a share in (0, 1]); got {fraction:g}")
    return fraction


def _head_dim(f: Fields) -> int:
    return int(f["head_dim_size"]) or int(f["hidden_size"]) // int(f["num_heads"])


def _glm4_moe(r: ConfigReader) -> Fields:
    """Glm4MoeForCausalLM: GQA with biased q/k/v projections (attention_bias) and an unbiased output,
    per-head QK RMSNorm with use_qk_norm; dense FFNs on the first first_k_dense_replace layers, then
    routed experts plus one shared MLP of n_shared_experts x moe_intermediate_size (Glm4MoeMoE: the
    same weights and FLOPs as that many shared experts)."""
    f = common_fields(r)
    _rotary_fraction(r, _head_dim(f))
    bias, n = r.bool("attention_bias", False), f["num_layers"]
    out = {**f, "qkv_bias": bias, "attn_out_bias": False, "qk_norm": "head" if r.bool("use_qk_norm", False) else "none"}
    experts, top_k = r.int("n_routed_experts"), r.int("num_experts_per_tok")
    check_moe(r, "n_routed_experts", experts, top_k)
    check_groups(r, experts, top_k)
    first_k = r.int("first_k_dense_replace")
    if first_k < 0:
        raise AutotuneError("config.first_k_dense_replace", f"must be >= 0 (dense layers before the MoE ones), got {first_k}")
    moe = list(range(first_k, n)) if experts else []
    if not moe:
        return {**out, "num_experts": 0}
    shared, width = r.int("n_shared_experts"), r.int("moe_intermediate_size")
    return {**out, "num_experts": experts, "num_experts_per_token": top_k, "expert_ffn_hidden_size": width,
            "num_shared_experts": shared, "shared_expert_ffn_hidden_size": width if shared else 0,
            **moe_layer_pattern(moe, n)}  # the router: hf_rope_router.py


def _minimax_m2(r: ConfigReader) -> Fields:
    """MiniMaxM2ForCausalLM: unbiased GQA with RMSNorm over the whole query and key projections
    (q_norm of heads x head_dim, k_norm of kv_heads x head_dim, always built), every layer MoE of
    intermediate_size experts without a shared one."""
    types = r.int_list("attn_type_list")
    if any(kind != 1 for kind in types):  # MiniMax-01's 0: lightning (linear) attention
        raise AutotuneError("config.attn_type_list", "only full-attention layers (1) are supported; 0 is MiniMax-01's "
                                                     "lightning linear attention, which autotune's graph does not have")
    f = common_fields(r)
    _rotary_fraction(r, _head_dim(f))
    experts, top_k = r.int("num_local_experts"), r.int("num_experts_per_tok")
    if not experts:
        raise AutotuneError("config.num_local_experts", "MiniMax-M2 builds an MoE on every layer; got 0 experts")
    check_moe(r, "num_local_experts", experts, top_k)
    return {**f, "qkv_bias": False, "attn_out_bias": False, "qk_norm": "full", "num_experts": experts,
            "num_experts_per_token": top_k, "expert_ffn_hidden_size": f["ffn_hidden_size"]}


MOE_FAMILIES = {"glm4_moe": _glm4_moe, "minimax_m2": _minimax_m2, "kimi_k2": _BASE["deepseek_v3"]}
