"""Hugging Face configs of every supported family: autotune's parameter counts against the model
``transformers`` builds from the same config on the meta device (no memory, no weights).

Configs are written by transformers' own config classes at the published dimensions (a few with
fewer layers, said so, where building the full model is slow); the counts must agree within 0.5%.
Multimodal configs (llama4, gemma3) are counted for their text model: transformers builds it from
the config's text_config (Llama4ForCausalLM, Gemma3ForCausalLM), the vision tower left out.
"""

from __future__ import annotations

import json
import re

import pytest

from autotune.errors import AutotuneError
from autotune.spec.hf_config import model_from_hf_config, model_from_hf_dict, supported_model_types

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

# model_type -> (label, published dimensions as config keys). Sources: the released config.json
# files of each model on the Hugging Face hub.
FAMILIES = {
    "llama": ("Llama-3-8B", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                 num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                                 max_position_embeddings=8192, rope_theta=500000.0)),
    "mistral": ("Mistral-7B-v0.1", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                        num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                                        sliding_window=4096)),
    "mixtral": ("Mixtral-8x7B", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                     num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                                     num_local_experts=8, num_experts_per_tok=2, rope_theta=1e6,
                                     max_position_embeddings=32768, sliding_window=None)),
    "qwen2": ("Qwen2-7B", dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                               intermediate_size=18944, vocab_size=152064, rope_theta=1e6)),
    "qwen2_moe": ("Qwen1.5-MoE-A2.7B", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                                            num_key_value_heads=16, intermediate_size=5632, moe_intermediate_size=1408,
                                            shared_expert_intermediate_size=5632, num_experts=60,
                                            num_experts_per_tok=4, vocab_size=151936)),
    "qwen3": ("Qwen3-8B", dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                               head_dim=128, intermediate_size=12288, vocab_size=151936, rope_theta=1e6)),
    "qwen3_moe": ("Qwen3-30B-A3B", dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                                        num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                                        moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                                        vocab_size=151936, max_position_embeddings=40960, rope_theta=1e6)),
    "deepseek_v2": ("DeepSeek-V2-Lite", dict(hidden_size=2048, num_hidden_layers=27, num_attention_heads=16,
                                             num_key_value_heads=16, intermediate_size=10944, q_lora_rank=None,
                                             kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                             v_head_dim=128, n_routed_experts=64, num_experts_per_tok=6,
                                             n_shared_experts=2, moe_intermediate_size=1408, first_k_dense_replace=1,
                                             vocab_size=102400, max_position_embeddings=163840)),
    "deepseek_v3": ("DeepSeek-V3", dict(hidden_size=7168, num_hidden_layers=61, num_attention_heads=128,
                                        num_key_value_heads=128, intermediate_size=18432, q_lora_rank=1536,
                                        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                                        n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1,
                                        moe_intermediate_size=2048, first_k_dense_replace=3, n_group=8, topk_group=4,
                                        vocab_size=129280, max_position_embeddings=163840)),
    "gemma": ("Gemma-7B", dict(hidden_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16,
                               head_dim=256, intermediate_size=24576, vocab_size=256000)),
    "gemma2": ("Gemma-2-9B", dict(hidden_size=3584, num_hidden_layers=42, num_attention_heads=16,
                                  num_key_value_heads=8, head_dim=256, intermediate_size=14336, vocab_size=256000,
                                  sliding_window=4096)),
    "phi3": ("Phi-3-mini-4k", dict(hidden_size=3072, num_hidden_layers=32, num_attention_heads=32,
                                   num_key_value_heads=32, intermediate_size=8192, vocab_size=32064)),
    "falcon": ("Falcon-7B", dict(hidden_size=4544, num_hidden_layers=32, num_attention_heads=71, vocab_size=65024,
                                 multi_query=True, parallel_attn=True, bias=False, new_decoder_architecture=False)),
    "gpt2": ("GPT-2", dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024)),
    "gpt_neox": ("Pythia-1.4B", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                                     intermediate_size=8192, vocab_size=50304)),
    "bloom": ("BLOOM-560M", dict(hidden_size=1024, n_layer=24, n_head=16, vocab_size=250880)),
    "olmoe": ("OLMoE-1B-7B", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16,
                                  num_key_value_heads=16, intermediate_size=1024, num_experts=64,
                                  num_experts_per_tok=8, vocab_size=50304, max_position_embeddings=4096)),
    "gpt_oss": ("gpt-oss-120b", dict(hidden_size=2880, num_hidden_layers=36, num_attention_heads=64,
                                     num_key_value_heads=8, head_dim=64, intermediate_size=2880, num_local_experts=128,
                                     num_experts_per_tok=4, vocab_size=201088, sliding_window=128)),
    "llama4": ("Llama-4-Scout-17B-16E", dict(text_config=dict(
        hidden_size=5120, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        intermediate_size=8192, intermediate_size_mlp=16384, num_local_experts=16, num_experts_per_tok=1,
        interleave_moe_layer_step=1, vocab_size=202048, attention_chunk_size=8192, use_qk_norm=True))),
    # Maverick: dense and MoE layers alternate (interleave_moe_layer_step 2), 128 experts, no QK norm
    "llama4_text": ("Llama-4-Maverick-17B-128E (text)", dict(
        hidden_size=5120, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        intermediate_size=8192, intermediate_size_mlp=16384, num_local_experts=128, num_experts_per_tok=1,
        interleave_moe_layer_step=2, vocab_size=202048, attention_chunk_size=8192, use_qk_norm=False)),
    "gemma3": ("Gemma-3-27B", dict(text_config=dict(
        hidden_size=5376, num_hidden_layers=62, num_attention_heads=32, num_key_value_heads=16, head_dim=128,
        intermediate_size=21504, query_pre_attn_scalar=168, sliding_window=1024,
        rope_scaling={"rope_type": "linear", "factor": 8.0}))),
    "gemma3_text": ("Gemma-3-4B (text)", dict(hidden_size=2560, num_hidden_layers=34, num_attention_heads=8,
                                              num_key_value_heads=4, head_dim=256, intermediate_size=10240,
                                              vocab_size=262208, sliding_window=1024)),
    # GLM-4.5 with 8 of its 92 layers (3 dense, 5 MoE): QK norm, biased q/k/v, 160 experts and a shared one
    "glm4_moe": ("GLM-4.5 (8 layers)", dict(hidden_size=5120, num_hidden_layers=8, num_attention_heads=96,
                                            num_key_value_heads=8, head_dim=128, intermediate_size=12288,
                                            moe_intermediate_size=1536, n_routed_experts=160, num_experts_per_tok=8,
                                            n_shared_experts=1, first_k_dense_replace=3, routed_scaling_factor=2.5,
                                            attention_bias=True, use_qk_norm=True, vocab_size=151552,
                                            partial_rotary_factor=0.5, rope_theta=1e6)),
    "minimax_m2": ("MiniMax-M2 (8 layers)", dict(num_hidden_layers=8, rotary_dim=64)),
    # Kimi K2 is DeepSeek-V3's code under its own model_type (transformers builds it as deepseek_v3)
    "kimi_k2": ("Kimi-K2 (6 layers)", dict(hidden_size=7168, num_hidden_layers=6, num_attention_heads=64,
                                          num_key_value_heads=64, intermediate_size=18432, q_lora_rank=1536,
                                          kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                          v_head_dim=128, n_routed_experts=384, num_experts_per_tok=8,
                                          n_shared_experts=1, moe_intermediate_size=2048, first_k_dense_replace=1,
                                          n_group=1, topk_group=1, vocab_size=163840)),
}
# model_types transformers 5.24 builds through another class: the checkpoint's auto_map loads DeepSeek-V3's code
BUILT_AS = {"kimi_k2": "deepseek_v3"}
# Further structural variants: Falcon-40B's new decoder architecture (8 of its 60 layers), Qwen MoE
# with dense layers and a sparse step, Gemma 2 with fewer layers, gpt-oss-20b, Gemma 3 1B (5 windowed
# layers to 1 full, 26 layers: the last two windowed), Llama 4 with NoPE layers listed.
VARIANTS = {
    "falcon-40b-8l": ("falcon", dict(hidden_size=8192, num_hidden_layers=8, num_attention_heads=128, num_kv_heads=8,
                                     new_decoder_architecture=True, vocab_size=65024, parallel_attn=True)),
    "qwen2-moe-sparse-step": ("qwen2_moe", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8,
                                                num_key_value_heads=4, intermediate_size=2816, moe_intermediate_size=512,
                                                shared_expert_intermediate_size=1024, num_experts=16,
                                                num_experts_per_tok=2, decoder_sparse_step=2, mlp_only_layers=[3],
                                                vocab_size=32000)),
    "llama-biases-tied": ("llama", dict(hidden_size=1024, num_hidden_layers=4, num_attention_heads=8,
                                        num_key_value_heads=2, head_dim=96, intermediate_size=2816, vocab_size=32000,
                                        attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    "gpt-oss-20b": ("gpt_oss", dict(hidden_size=2880, num_hidden_layers=24, num_attention_heads=64,
                                    num_key_value_heads=8, head_dim=64, intermediate_size=2880, num_local_experts=32,
                                    num_experts_per_tok=4, vocab_size=201088, sliding_window=128)),
    # GLM-4.5-Air's sizes (Glm4MoeConfig's defaults) with head_dim 128 and 6 layers, no QK norm; one dense layer
    "glm-4.5-air-6l": ("glm4_moe", dict(num_hidden_layers=6, head_dim=128, attention_bias=True)),
    "gemma-3-1b": ("gemma3_text", dict(hidden_size=1152, num_hidden_layers=26, num_attention_heads=4,
                                       num_key_value_heads=1, head_dim=256, intermediate_size=6912, vocab_size=262144,
                                       sliding_window=512)),
    "llama4-nope-listed-dense-first": ("llama4_text", dict(
        hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
        intermediate_size=256, intermediate_size_mlp=1024, num_local_experts=4, num_experts_per_tok=2,
        moe_layers=[2, 3, 5], no_rope_layers=[1, 0, 1, 0, 1, 0], vocab_size=1000, attention_bias=True)),
}


def _config(model_type: str, keys: dict):
    return transformers.AutoConfig.for_model(BUILT_AS.get(model_type, model_type), **keys)


def _as_written(config, model_type: str) -> str:
    """The config as its checkpoint writes it: transformers' JSON under the file's own model_type."""
    return json.dumps({**json.loads(config.to_json_string(use_diff=False)), "model_type": model_type})


def _meta_counts(config) -> tuple[int, int]:
    """(total parameters, parameters a token uses) of the model transformers builds (a multimodal
    config: its text model); the active count removes the unused (E - k) / E share of every
    routed-expert tensor."""
    config = config.get_text_config()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if re.search(r"\.experts\.", n))
    count = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) \
        or getattr(config, "n_routed_experts", None) or 0
    top_k = getattr(config, "num_experts_per_tok", 0) or 0
    unused = experts * (count - top_k) // count if count else 0
    return total, total - unused


def _autotune_model(config, tmp_path, model_type: str = ""):
    path = tmp_path / "config.json"
    path.write_text(_as_written(config, model_type) if model_type else config.to_json_string(use_diff=False))
    return model_from_hf_config(path)


CASES = [(t, label, keys) for t, (label, keys) in FAMILIES.items()] + \
        [(t, label, keys) for label, (t, keys) in VARIANTS.items()]


@pytest.mark.parametrize("model_type, label, keys", CASES, ids=[c[1] for c in CASES])
def test_parameter_counts_match_transformers(model_type, label, keys, tmp_path):
    config = _config(model_type, keys)
    total, active = _meta_counts(config)
    model = _autotune_model(config, tmp_path, model_type)
    assert model.num_parameters() == pytest.approx(total, rel=5e-3), label
    assert model.num_active_parameters() == pytest.approx(active, rel=5e-3), label
    assert model.is_moe == (active < total)


# The hub's own files (tests/data/hf_configs/, as published: 4.x keys, only the differences from the
# config class's defaults for Gemma 3), read by transformers 5.24 and by autotune.
HUB_FILES = ["gpt-oss-120b.json", "gpt-oss-20b.json", "llama-4-scout-17b-16e.json", "gemma-3-27b.json",
             "glm-4.5-air.json", "minimax-m2.json"]


@pytest.mark.parametrize("file", HUB_FILES)
def test_published_configs_match_transformers(data_dir, file):
    data = json.loads((data_dir / "hf_configs" / file).read_text())
    keys = {k: v for k, v in data.items() if k not in ("_comment", "model_type", "quantization_config")}  # MXFP4 aside
    if "attn_temperature_tuning" in keys.get("text_config", {}):  # 4.51 wrote 4; 5.24's strict class wants a bool
        keys["text_config"] = {**keys["text_config"], "attn_temperature_tuning": True}
    total, active = _meta_counts(_config(data["model_type"], keys))
    model = model_from_hf_config(data_dir / "hf_configs" / file)
    assert (model.num_parameters(), model.num_active_parameters()) == (total, active)


def test_every_supported_family_is_tested():
    assert set(FAMILIES) == set(supported_model_types())


@pytest.mark.parametrize("model_type", ["t5", "bart", "mamba"])
def test_encoder_decoders_and_state_space_models_are_refused(model_type, tmp_path):
    config = _config(model_type, {})
    with pytest.raises(AutotuneError) as err:
        _autotune_model(config, tmp_path)
    assert err.value.field == "config.model_type" and "supported: " in str(err.value) and "mixtral" in str(err.value)


_SMALL = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, intermediate_size=512, vocab_size=1000)
# Small dense models of each attention variant (DeepSeek with all layers dense: the MoE part of the
# graph is checked elsewhere).
FLOP_CASES = {
    "deepseek_v3": dict(_SMALL, num_key_value_heads=8, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16,
                        qk_nope_head_dim=32, v_head_dim=48, n_routed_experts=8, num_experts_per_tok=2,
                        first_k_dense_replace=2, moe_intermediate_size=128, n_group=1, topk_group=1),
    "deepseek_v2": dict(_SMALL, num_key_value_heads=8, q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16,
                        qk_nope_head_dim=32, v_head_dim=48, n_routed_experts=8, num_experts_per_tok=2,
                        first_k_dense_replace=2, moe_intermediate_size=128),
    "gemma": dict(_SMALL, num_key_value_heads=2, head_dim=48),
    "falcon": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, vocab_size=1000),
    "qwen3": dict(_SMALL, num_key_value_heads=2, head_dim=64),
    "gemma3_text": dict(_SMALL, num_key_value_heads=2, head_dim=64, sliding_window=16, sliding_window_pattern=2),
    "llama4_text": dict(_SMALL, num_key_value_heads=2, head_dim=32, intermediate_size_mlp=384, moe_layers=[],
                        attention_chunk_size=16),
    # GLM-4.5's attention (head_dim apart from hidden / heads, q/k/v biases, QK norm, RoPE on half of each head)
    # with both layers dense: the rotated share changes no matrix-multiply FLOP
    "glm4_moe": dict(_SMALL, num_key_value_heads=2, head_dim=64, attention_bias=True, use_qk_norm=True,
                     n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=2, moe_intermediate_size=128,
                     partial_rotary_factor=0.5),
}


@pytest.mark.parametrize("model_type", list(FLOP_CASES))
def test_forward_flops_match_the_operator_graph(model_type):
    """Matrix-multiply FLOPs of one eager forward pass (torch's FlopCounterMode) against the
    graph's GEMM and attention FLOPs (unfused: the full s x s scores, as eager attention computes)."""
    from torch.utils.flop_counter import FlopCounterMode

    from autotune.graph import model_tables

    config = _config(model_type, FLOP_CASES[model_type])
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    s = 64
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randint(0, 1000, (1, s)))
    spec = model_from_hf_dict(config.to_dict())
    tables = model_tables(spec, s, 4, "unfused")
    matmul = ("gemm", "bmm", "attention")
    layer = sum(f for kind, f in zip(tables.layer.kinds, tables.layer.flops) if kind in matmul)
    head = sum(f for kind, f in zip(tables.head.kinds, tables.head.flops) if kind in matmul)
    assert spec.num_layers * layer + head == pytest.approx(counter.get_total_flops(), rel=0.02)


def test_attention_details_survive_the_config_round_trip(tmp_path):
    """What transformers writes (layer_types, rope_parameters, renamed keys) is read back."""
    read = lambda t: _autotune_model(_config(t, FAMILIES[t][1]), tmp_path)  # noqa: E731
    gemma2 = read("gemma2")
    assert (gemma2.sliding_window, gemma2.sliding_window_every, gemma2.norms_per_layer) == (4096, 2, 4)
    assert (read("mistral").sliding_window, read("mistral").sliding_window_every) == (4096, 1)
    assert read("mixtral").rope_theta == 1e6 and read("qwen2").qkv_bias and not read("qwen2").attn_out_bias
    qwen3_moe = read("qwen3_moe")
    assert (qwen3_moe.num_experts, qwen3_moe.head_dim, qwen3_moe.qk_norm) == (128, 128, "head")
    assert read("olmoe").qk_norm == "full" and read("bloom").embedding_norm
    gpt_oss = read("gpt_oss")
    assert (gpt_oss.sliding_window, gpt_oss.sliding_window_every, gpt_oss.attention_sinks, gpt_oss.router_bias) == \
        (128, 2, True, True)
    assert (gpt_oss.router, gpt_oss.expert_act_clamp, gpt_oss.rope_scaling, gpt_oss.rope_yarn_truncate) == \
        ("topk_softmax", 7.0, "yarn", False)
    scout, maverick = read("llama4"), read("llama4_text")
    assert (scout.sliding_window, scout.full_attention_every, scout.window_kind, scout.qk_norm) == \
        (8192, 4, "chunked", "l2")
    assert (scout.router, scout.num_shared_experts, scout.num_moe_layers, scout.ffn_hidden_size) == \
        ("topk_sigmoid", 1, 48, 16384)
    assert (maverick.num_moe_layers, maverick.first_k_dense_layers, maverick.moe_layer_frequency) == (24, 1, 2)
    gemma3 = read("gemma3")
    assert (gemma3.sliding_window, gemma3.full_attention_every, gemma3.qk_norm, gemma3.norms_per_layer) == \
        (1024, 6, "head", 4)
    assert (gemma3.rope_scaling, gemma3.rope_scaling_factor, gemma3.rope_theta) == ("linear", 8.0, 1e6)
    assert "text model only" in gemma3.source and gemma3.tied_embeddings


def test_glm_minimax_and_kimi_details(data_dir, tmp_path):
    """What the 2025 sigmoid-routed families' configs say about attention and routing is read."""
    read = lambda t: _autotune_model(_config(t, FAMILIES[t][1]), tmp_path, t)  # noqa: E731
    glm = read("glm4_moe")
    assert (glm.qkv_bias, glm.attn_out_bias, glm.qk_norm, glm.head_dim, glm.num_kv_heads) == (True, False, "head", 128, 8)
    assert (glm.first_k_dense_layers, glm.num_shared_experts, glm.shared_expert_ffn_hidden_size) == (3, 1, 1536)
    assert (glm.router, glm.router_scaling_factor, glm.router_expert_bias, glm.router_groups) == \
        ("sigmoid_topk", 2.5, True, 0)
    minimax = read("minimax_m2")
    assert (minimax.qk_norm, minimax.num_moe_layers, minimax.num_shared_experts, minimax.rope_theta) == \
        ("full", 8, 0, 5e6)
    assert (minimax.router, minimax.router_scaling_factor, minimax.router_expert_bias) == ("sigmoid_topk", 1.0, True)
    hub = model_from_hf_config(data_dir / "hf_configs" / "minimax-m2.json")
    assert hub.fp8_block_scaled and "model_type minimax_m2" in hub.source
    kimi = model_from_hf_config(data_dir / "hf_configs" / "kimi-k2-instruct.json")
    assert (kimi.num_heads, kimi.kv_lora_rank, kimi.num_experts, kimi.router_scaling_factor) == (64, 512, 384, 2.827)


@pytest.mark.parametrize("model_type, change, field", [
    ("glm4_moe", {"partial_rotary_factor": 1.5}, "config.partial_rotary_factor"),
    ("glm4_moe", {"norm_topk_prob": False}, "config.norm_topk_prob"),
    ("glm4_moe", {"first_k_dense_replace": -1}, "config.first_k_dense_replace"),
    ("glm4_moe", {"n_group": 3}, "config.n_group"),
    ("minimax_m2", {"attn_type_list": [0, 1]}, "config.attn_type_list"),
    ("minimax_m2", {"rotary_dim": 512}, "config.partial_rotary_factor"),
    ("minimax_m2", {"num_local_experts": 0}, "config.num_local_experts"),
])
def test_bad_moe_family_keys_name_the_key(model_type, change, field):
    data = {**json.loads(_as_written(_config(model_type, FAMILIES[model_type][1]), model_type)), **change}
    data.pop("rope_parameters", None)  # the 4.x spelling, as the hub's files write it
    with pytest.raises(AutotuneError) as err:
        model_from_hf_dict(data)
    assert err.value.field == field
