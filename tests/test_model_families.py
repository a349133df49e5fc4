"""MoE, latent-attention and modern dense specs: presets, stored configs, bad input (no transformers needed)."""

from __future__ import annotations

import json

import pytest

from autotune.errors import AutotuneError
from autotune.spec.hf_config import model_from_hf_config, model_from_hf_dict
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset


@pytest.mark.parametrize("name, total, active", [
    ("mixtral-8x7b", 46.7e9, 12.9e9),  # Mixtral paper: 47B (46.7B), 13B active
    ("mixtral-8x22b", 140.6e9, 39.2e9),  # Mistral AI: 141B, 39B active
    ("deepseek-v3", 671.0e9, 37.6e9),  # DeepSeek-V3 report: 671B, 37B active
    ("qwen3-30b-a3b", 30.5e9, 3.35e9),  # Qwen3 report: 30.5B, 3.3B active
    ("qwen3-235b-a22b", 235.1e9, 22.2e9),  # 235B, 22B active
    ("olmoe-1b-7b", 6.92e9, 1.28e9),  # OLMoE paper: 6.9B, 1.3B active
])
def test_moe_presets_have_the_published_counts(name, total, active):
    model = load_preset(name)
    assert model.is_moe
    assert model.num_parameters() == pytest.approx(total, rel=2e-3)
    assert model.num_active_parameters() == pytest.approx(active, rel=1e-2)


@pytest.mark.parametrize("file, total", [
    ("mixtral-8x7b.json", 46_702_792_704),
    ("deepseek-v3.json", 671_026_404_352),
    ("qwen3-30b-a3b.json", 30_532_122_624),
    ("falcon-7b.json", 6_921_720_704),  # the 8.23B came from ignoring multi-query and no-bias
    ("gemma-7b.json", 8_537_680_896),  # and 8.19B from ignoring head_dim 256
])
def test_stored_transformers_configs(data_dir, file, total):
    """Written by transformers at the published shapes; the counts are what it builds (see
    tests/test_hf_configs.py, which builds them)."""
    model = model_from_hf_config(data_dir / "hf_configs" / file)
    assert model.num_parameters() == total


@pytest.mark.parametrize("file, total, active", [
    # as transformers 5.24 builds them (tests/test_hf_configs.py test_published_configs_match_transformers);
    # the model card's 116.83B / 20.91B; its 5.13B / 3.61B active leave out the token embedding (0.58B)
    ("gpt-oss-120b.json", 116_829_156_672, 5_711_982_912),
    ("gpt-oss-20b.json", 20_914_757_184, 4_187_440_704),
    ("llama-4-scout-17b-16e.json", 107_769_861_120, 17_172_894_720),  # text model: 109.7B less the vision tower
    ("gemma-3-27b.json", 27_009_346_304, 27_009_346_304),  # text model
])
def test_published_configs(data_dir, file, total, active):
    """The hub's config.json files as published (4.x keys; Gemma 3's only the non-default ones)."""
    model = model_from_hf_config(data_dir / "hf_configs" / file)
    assert (model.num_parameters(), model.num_active_parameters()) == (total, active)


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gpt-oss-20b"])
def test_gpt_oss_presets_are_their_configs(data_dir, name):
    preset, read = load_preset(name), model_from_hf_config(data_dir / "hf_configs" / f"{name}.json")
    explicit = preset.with_changes(source="", qkv_bias=True, attn_out_bias=True, ffn_bias=True)  # bias = true, spelt out
    assert explicit == read.with_changes(source="")


def test_published_configs_read_attention_and_experts(data_dir):
    read = lambda f: model_from_hf_config(data_dir / "hf_configs" / f)  # noqa: E731
    gpt = read("gpt-oss-120b.json")
    assert [gpt.is_windowed_layer(i) for i in range(4)] == [True, False, True, False]
    assert gpt.cached_positions(4096) == pytest.approx((4096 + 128) / 2)
    scout = read("llama-4-scout-17b-16e.json")
    assert [scout.is_windowed_layer(i) for i in range(8)] == [True, True, True, False] * 2
    assert (scout.window_kind, scout.router, scout.rope_scaling, scout.max_seq_len) == \
        ("chunked", "topk_sigmoid", "llama3", 262144)
    gemma = read("gemma-3-27b.json")
    assert [i for i in range(62) if not gemma.is_windowed_layer(i)] == list(range(5, 62, 6))
    assert (gemma.vocab_size, gemma.head_dim, gemma.ffn_activation) == (262208, 128, "geglu")  # vocab: the default


def test_stored_configs_read_every_detail(data_dir):
    read = lambda f: model_from_hf_config(data_dir / "hf_configs" / f)  # noqa: E731
    ds = read("deepseek-v3.json")
    assert (ds.is_mla, ds.q_lora_rank, ds.kv_lora_rank, ds.qk_rope_head_dim) == (True, 1536, 512, 64)
    assert (ds.num_experts, ds.num_experts_per_token, ds.num_shared_experts, ds.first_k_dense_layers) == (256, 8, 1, 3)
    assert ds.router == "sigmoid_topk" and ds.num_moe_layers == 58
    assert ds.kv_cache_elements_per_token_per_layer() == 576
    falcon = read("falcon-7b.json")
    assert (falcon.num_kv_heads, falcon.bias, falcon.norms_per_layer, falcon.tied_embeddings) == (1, False, 1, True)
    gemma = read("gemma-7b.json")
    assert (gemma.head_dim, gemma.q_width, gemma.ffn_activation) == (256, 4096, "geglu")
    qwen = read("qwen3-30b-a3b.json")
    assert (qwen.head_dim, qwen.num_kv_heads, qwen.qk_norm, qwen.num_experts) == (128, 4, "head", 128)
    mixtral = read("mixtral-8x7b.json")
    assert (mixtral.router, mixtral.rope_theta, mixtral.kv_cache_elements_per_token_per_layer()) == \
        ("topk_softmax", 1e6, 2 * 8 * 128)


def _llama(**extra):
    return {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
            "intermediate_size": 512, "vocab_size": 1000, **extra}


@pytest.mark.parametrize("data, field", [
    ({"model_type": "t5", "d_model": 512}, "config.model_type"),
    ({"model_type": "mamba", "hidden_size": 768}, "config.model_type"),
    ({"hidden_size": 768}, "config.model_type"),
    ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 10, "n_inner": {"x": 1}},
     "config.n_inner"),
    (_llama(num_key_value_heads="8"), "config.num_key_value_heads"),
    (_llama(tie_word_embeddings="yes"), "config.tie_word_embeddings"),
    (_llama(rope_theta="big"), "config.rope_theta"),
    ({**_llama(), "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 6},
     "config.num_experts_per_tok"),
    ({**_llama(), "model_type": "qwen3_moe", "num_experts": 0, "num_experts_per_tok": 2},
     "config.num_experts_per_tok"),
    ({**_llama(), "model_type": "qwen2_moe", "decoder_sparse_step": 0}, "config.decoder_sparse_step"),
    ({**_llama(), "model_type": "qwen2_moe", "mlp_only_layers": ["a"]}, "config.mlp_only_layers"),
    ({**_llama(), "model_type": "deepseek_v3", "n_routed_experts": 64, "n_group": 5}, "config.n_group"),
    ({**_llama(), "model_type": "deepseek_v3", "n_routed_experts": 64, "n_group": 8, "topk_group": 9},
     "config.topk_group"),
    ({**_llama(), "model_type": "deepseek_v2", "num_experts_per_tok": None}, "config.num_experts_per_tok"),
    ({**_llama(), "model_type": "deepseek_v3", "first_k_dense_replace": 0, "moe_layer_freq": 0},
     "config.moe_layer_freq"),
    ({**_llama(), "model_type": "gemma2", "layer_types": ["full_attention", "sliding_attention",
                                                          "sliding_attention", "full_attention"]},
     "config.layer_types"),
    ({**_llama(), "model_type": "gpt_oss", "num_local_experts": 0}, "config.num_local_experts"),
    ({**_llama(), "model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 5},
     "config.num_experts_per_tok"),
    ({**_llama(), "model_type": "gpt_oss", "swiglu_limit": "7"}, "config.swiglu_limit"),
    ({"model_type": "llama4", "text_config": [1]}, "config.text_config"),
    ({**_llama(), "model_type": "llama4_text", "moe_layers": [0, 9]}, "config.moe_layers"),
    ({**_llama(), "model_type": "llama4_text", "interleave_moe_layer_step": 0}, "config.interleave_moe_layer_step"),
    ({**_llama(), "model_type": "llama4_text", "no_rope_layers": [1, 0]}, "config.no_rope_layers"),
    ({**_llama(), "model_type": "llama4_text", "no_rope_layer_interval": 0}, "config.no_rope_layer_interval"),
    ({**_llama(), "model_type": "llama4_text", "attention_chunk_size": None,
      "layer_types": ["chunked_attention"] * 4}, "config.attention_chunk_size"),
    ({"model_type": "gemma3", "text_config": {**_llama(), "sliding_window_pattern": 0}},
     "config.sliding_window_pattern"),
    ({**_llama(), "model_type": "gemma3_text", "use_bidirectional_attention": True},
     "config.use_bidirectional_attention"),
    ({**_llama(), "model_type": "gemma3_text", "layer_types": ["full_attention", "sliding_attention",
                                                               "sliding_attention", "full_attention"]},
     "config.layer_types"),
])
def test_bad_configs_name_the_key(data, field):
    with pytest.raises(AutotuneError) as err:
        model_from_hf_dict(data)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_refusal_lists_the_supported_types():
    with pytest.raises(AutotuneError, match="encoder-decoder.*supported: .*deepseek_v3.*olmoe"):
        model_from_hf_dict({"model_type": "bart", "is_encoder_decoder": True})


def test_cli_refuses_an_unsupported_config_with_exit_2(tmp_path, capsys):
    from autotune.cli.main import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "t5", "is_encoder_decoder": True, "d_model": 1024}))
    assert main(["evaluate", "--model", str(path), "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.model_type" in err[0] and "llama" in err[0]


def test_moe_layer_patterns():
    deepseek = load_preset("deepseek-v3")
    assert [deepseek.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    qwen = model_from_hf_dict({**_llama(num_hidden_layers=8), "model_type": "qwen2_moe", "num_experts": 8,
                               "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [5]})
    assert [i for i in range(8) if qwen.is_moe_layer(i)] == [1, 3, 7]
    assert (qwen.first_k_dense_layers, qwen.moe_layer_frequency, qwen.mlp_only_layers) == (1, 2, (5,))
    dense = model_from_hf_dict({**_llama(), "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                                "mlp_only_layers": [0, 1, 2, 3]})
    assert not dense.is_moe and dense.num_parameters() == dense.num_active_parameters()


def test_windows_and_rope():
    gemma2 = model_from_hf_dict({**_llama(), "model_type": "gemma2", "head_dim": 64, "sliding_window": 128})
    assert [gemma2.is_windowed_layer(i) for i in range(4)] == [True, False, True, False]
    mistral = model_from_hf_dict({**_llama(), "model_type": "mistral", "sliding_window": None,
                                  "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert mistral.sliding_window == 0 and mistral.rope_theta == 1e6
    assert model_from_hf_dict({**_llama(), "model_type": "mistral"}).sliding_window == 4096  # MistralConfig default
    # all but every 3rd layer windowed: Gemma 3's pattern at 3, read from layer_types
    three = model_from_hf_dict({**_llama(num_hidden_layers=6), "model_type": "gemma2", "sliding_window": 64,
                                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2})
    assert (three.full_attention_every, [three.is_windowed_layer(i) for i in range(6)]) == \
        (3, [True, True, False, True, True, False])
    gemma3 = model_from_hf_dict({**_llama(), "model_type": "gemma3_text", "sliding_window": None})
    assert gemma3.sliding_window == 0 and gemma3.vocab_size == 1000  # null: no window (Gemma3TextConfig allows it)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    assert model_from_hf_dict({**_llama(rope_scaling=yarn)}).rope_yarn_truncate


def test_spec_refuses_contradicting_moe_fields():
    base = load_preset("mixtral-8x7b")
    with pytest.raises(AutotuneError, match="model.num_experts_per_token"):
        base.with_changes(num_experts_per_token=9)
    with pytest.raises(AutotuneError, match="model.mlp_only_layers"):
        base.with_changes(mlp_only_layers=(40,))
    with pytest.raises(AutotuneError, match="model.q_lora_rank"):
        base.with_changes(q_lora_rank=64)
    with pytest.raises(AutotuneError, match="model.norms_per_layer"):
        base.with_changes(norms_per_layer=3)
    with pytest.raises(AutotuneError, match="model.full_attention_every"):
        base.with_changes(sliding_window=64, full_attention_every=1)
    with pytest.raises(AutotuneError, match="model.full_attention_every"):
        base.with_changes(sliding_window=64, full_attention_every=4, sliding_window_every=2)
    with pytest.raises(AutotuneError, match="model.window_kind"):
        base.with_changes(window_kind="blocked")


def test_active_parameters_of_a_dense_model_are_all():
    model = load_preset("llama3-8b")
    assert model.num_active_parameters() == model.num_parameters() == 8_030_261_248


def test_plan_file_round_trip_keeps_tuples():
    from dataclasses import asdict

    from autotune.plan.io import model_from_dict

    model = load_preset("qwen3-30b-a3b").with_changes(mlp_only_layers=(0, 47))
    again = model_from_dict(json.loads(json.dumps(asdict(model))))
    assert again == model and isinstance(again, ModelSpec)
