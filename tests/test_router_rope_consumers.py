"""Routers and RoPE scaling read from Hugging Face configs and exported to Megatron-LM compute
what transformers computes: the same logits through transformers' router module and through
Megatron-Core's topk_routing_with_score_function configured by the export's flags pick the same
experts with the same weights; Megatron-Core's rotary embeddings built from the flags have the
frequencies of transformers' RoPE initialisers. Skipped without the frameworks (failed under CI=true)."""

from __future__ import annotations

import warnings

import pytest

from autotune.errors import AutotuneError
from autotune.outputs.export.megatron_moe import moe_model_flags, rope_flags
from autotune.spec.hf_config import model_from_hf_dict
from test_export_consumers import _framework, _megatron_kwargs


def _hf(module: str, config_class: str, **keys):
    transformers = _framework("transformers")
    config = getattr(transformers, config_class)(**keys)
    return config, {**config.to_dict(), "model_type": config.model_type}


SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=256,
             intermediate_size=128)
# (transformers module, config class, router class, config keys)
ROUTERS = {
    "mixtral": ("mixtral", "MixtralConfig", "MixtralTopKRouter", dict(num_local_experts=8, num_experts_per_tok=2)),
    "qwen3-moe-renormalised": ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeTopKRouter",
                               dict(num_experts=16, num_experts_per_tok=4, moe_intermediate_size=32, norm_topk_prob=True)),
    "qwen3-moe-raw": ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeTopKRouter",
                      dict(num_experts=16, num_experts_per_tok=4, moe_intermediate_size=32, norm_topk_prob=False)),
    "qwen2-moe": ("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeTopKRouter",
                  dict(num_experts=16, num_experts_per_tok=4, moe_intermediate_size=32,
                       shared_expert_intermediate_size=64)),
    "olmoe-renormalised": ("olmoe", "OlmoeConfig", "OlmoeTopKRouter",
                           dict(num_experts=16, num_experts_per_tok=4, norm_topk_prob=True)),
    "deepseek-v2-scaled": ("deepseek_v2", "DeepseekV2Config", "DeepseekV2TopkRouter",
                           dict(n_routed_experts=16, num_experts_per_tok=4, moe_intermediate_size=32,
                                routed_scaling_factor=16.0, first_k_dense_replace=0, kv_lora_rank=16, q_lora_rank=None,
                                qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)),
    "deepseek-v3-groups": ("deepseek_v3", "DeepseekV3Config", "DeepseekV3TopkRouter",
                           dict(n_routed_experts=32, num_experts_per_tok=8, n_group=8, topk_group=4,
                                moe_intermediate_size=32, routed_scaling_factor=2.5, first_k_dense_replace=0,
                                kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)),
}


def _megatron_router(spec, num_layers: int):
    moe_utils = _framework("megatron.core.transformer.moe.moe_utils")
    transformer = _framework("megatron.core.transformer.transformer_config")
    flags = dict(moe_model_flags(spec))
    kwargs = _megatron_kwargs(flags, num_layers)["transformer"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformer.TransformerConfig(num_layers=num_layers, hidden_size=spec.hidden_size,
                                               num_attention_heads=spec.num_heads, **kwargs)
    return config, moe_utils.topk_routing_with_score_function


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_megatron_routes_like_transformers(name):
    torch = _framework("torch")
    module, config_class, router_class, keys = ROUTERS[name]
    hf_config, data = _hf(module, config_class, **{**SMALL, **keys})
    spec = model_from_hf_dict(data, name=name)
    modeling = _framework(f"transformers.models.{module}.modeling_{module}")
    torch.manual_seed(0)
    router = getattr(modeling, router_class)(hf_config)
    with torch.no_grad():
        router.weight.normal_(0.0, 0.5)
        hidden = torch.randn(256, spec.hidden_size)
        logits, weights, experts = router(hidden)
    config, route = _megatron_router(spec, 2)
    bias = torch.zeros(spec.num_experts) if config.moe_router_enable_expert_bias else None
    probs, chosen = route(logits.float(), config.moe_router_topk, use_pre_softmax=config.moe_router_pre_softmax,
                          num_groups=config.moe_router_num_groups, group_topk=config.moe_router_group_topk,
                          scaling_factor=config.moe_router_topk_scaling_factor,
                          score_function=config.moe_router_score_function, expert_bias=bias)
    dense = torch.zeros_like(probs).scatter(1, experts, weights.float())
    assert torch.equal(chosen, dense != 0), "different experts chosen"
    assert torch.allclose(probs, dense, rtol=1e-5, atol=1e-6), (probs - dense).abs().max()


def test_the_router_check_can_fail():
    """Megatron's pre-softmax (no renormalisation) against Qwen3-MoE's renormalised weights differs."""
    torch = _framework("torch")
    module, config_class, router_class, keys = ROUTERS["qwen3-moe-renormalised"]
    hf_config, data = _hf(module, config_class, **{**SMALL, **keys})
    spec = model_from_hf_dict(data).with_changes(router="softmax_topk")  # the old reading of norm_topk_prob
    router = getattr(_framework(f"transformers.models.{module}.modeling_{module}"), router_class)(hf_config)
    with torch.no_grad():
        router.weight.normal_(0.0, 0.5)
        logits, weights, experts = router(torch.randn(64, spec.hidden_size))
    config, route = _megatron_router(spec, 2)
    probs, _ = route(logits.float(), config.moe_router_topk, use_pre_softmax=config.moe_router_pre_softmax,
                     score_function=config.moe_router_score_function)
    assert not torch.allclose(probs, torch.zeros_like(probs).scatter(1, experts, weights.float()), atol=1e-3)


def test_deepseek_v2_group_limited_routing_is_refused_for_megatron():
    """DeepSeek-V2 scores a group by its best expert; Megatron-Core by the sum of its top k/groups."""
    _, data = _hf("deepseek_v2", "DeepseekV2Config", **{**SMALL, **ROUTERS["deepseek-v2-scaled"][3]},
                  topk_method="group_limited_greedy", n_group=4, topk_group=2)
    spec = model_from_hf_dict(data)
    assert (spec.router_groups, spec.router_group_topk) == (4, 2)
    with pytest.raises(AutotuneError) as err:
        moe_model_flags(spec)
    assert err.value.field == "model.router_groups"


# RoPE scaling ---------------------------------------------------------------------------------

LLAMA = dict(SMALL, num_attention_heads=4, max_position_embeddings=131072, rope_theta=500000.0)
ROPES = {
    "llama3.1": dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "linear": dict(rope_scaling={"rope_type": "linear", "factor": 4.0}),
    "yarn": dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
}


def _megatron_rope(flags: dict, head_dim: int, theta: float, monkeypatch):
    torch = _framework("torch")
    embeddings = _framework("megatron.core.models.common.embeddings")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")  # its get_emb moves tables to the GPU
    kwargs = _megatron_kwargs(flags, 2)
    gpt, yarn = kwargs["gpt"], kwargs["yarn"]
    if yarn:
        rope = embeddings.YarnRotaryEmbedding(
            kv_channels=head_dim, rotary_base=theta, use_cpu_initialization=True,
            scaling_factor=yarn["yarn_rotary_scaling_factor"],
            original_max_position_embeddings=yarn["yarn_original_max_position_embeddings"],
            beta_fast=yarn["yarn_beta_fast"], beta_slow=yarn["yarn_beta_slow"], mscale=yarn["yarn_mscale"],
            mscale_all_dim=yarn["yarn_mscale_all_dim"])
        return lambda n: rope.get_emb(n)
    rope = embeddings.RotaryEmbedding(kv_channels=head_dim, rotary_percent=1.0, rotary_base=theta,
                                      use_cpu_initialization=True, rope_scaling=gpt.get("rope_scaling", False),
                                      rope_scaling_factor=gpt.get("rope_scaling_factor", 8.0),
                                      seq_len_interpolation_factor=gpt.get("seq_len_interpolation_factor"))
    return lambda n: (torch.cat([rope.get_freqs_non_repeated(n)] * 2, dim=-1)[:, None, None, :], 1.0)


@pytest.mark.parametrize("name", sorted(ROPES))
def test_megatron_rope_scaling_has_transformers_frequencies(name, monkeypatch):
    torch = _framework("torch")
    rope_utils = _framework("transformers.modeling_rope_utils")
    hf_config, data = _hf("llama", "LlamaConfig", **LLAMA, **ROPES[name])
    spec = model_from_hf_dict(data)
    assert spec.rope_scaling == ROPES[name]["rope_scaling"]["rope_type"]
    flags = dict(rope_flags(spec))
    if name == "yarn":
        flags["--position-embedding-type"] = "yarn"
    inv_freq, attention = rope_utils.ROPE_INIT_FUNCTIONS[spec.rope_scaling](hf_config, "cpu")
    positions = 40000
    expected = torch.outer(torch.arange(positions, dtype=torch.float32), inv_freq.float())
    emb, mscale = _megatron_rope(flags, spec.head_dim, spec.rope_theta, monkeypatch)(positions)
    ours = emb[:, 0, 0, : spec.head_dim // 2]
    assert torch.allclose(ours, expected, rtol=1e-4, atol=1e-3), (ours - expected).abs().max()
    assert mscale == pytest.approx(attention, rel=1e-6)


def test_rope_check_can_fail(monkeypatch):
    """Without the scaling flags Megatron-Core's frequencies differ from Llama 3.1's."""
    torch = _framework("torch")
    rope_utils = _framework("transformers.modeling_rope_utils")
    hf_config, data = _hf("llama", "LlamaConfig", **LLAMA, **ROPES["llama3.1"])
    spec = model_from_hf_dict(data)
    inv_freq, _ = rope_utils.ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    emb, _ = _megatron_rope({}, spec.head_dim, spec.rope_theta, monkeypatch)(100)
    assert not torch.allclose(emb[:, 0, 0, : spec.head_dim // 2], torch.outer(torch.arange(100.0), inv_freq.float()))


def test_deepseek_v3_yarn_reaches_latent_attention():
    """DeepSeek-V3's published rope_scaling (yarn, factor 40, mscale 1/1) becomes MLATransformerConfig's."""
    transformer = _framework("megatron.core.transformer.transformer_config")
    _, data = _hf("deepseek_v3", "DeepseekV3Config", **{**SMALL, **ROUTERS["deepseek-v3-groups"][3]},
                  max_position_embeddings=163840,
                  rope_scaling={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                                "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
    spec = model_from_hf_dict(data)
    assert (spec.rope_scaling, spec.rope_scaling_factor, spec.rope_mscale_all_dim) == ("yarn", 40.0, 1.0)
    kwargs = _megatron_kwargs(dict(rope_flags(spec)) | {"--multi-latent-attention": None}, 2)["transformer"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformer.MLATransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, **kwargs)
    assert (config.rope_type, config.rotary_scaling_factor, config.mscale, config.mscale_all_dim) == \
        ("yarn", 40.0, 1.0, 1.0)
    assert (config.original_max_position_embeddings, config.beta_fast, config.beta_slow) == (4096, 32, 1)
