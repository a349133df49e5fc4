"""Model specs, presets, Hugging Face configs, hardware data: shapes and bad input."""

import json

import pytest

from autotune.errors import AutotuneError
from autotune.graph import model_tables
from autotune.spec.hardware_data import cluster_names, device_names, load_cluster, load_device
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset, preset_names, resolve_model


def params(model):
    return model_tables(model, 1024, 2).num_params


@pytest.mark.parametrize("name, expected", [
    ("gpt3-175b", 174.6e9),  # Brown et al. 2020: 175.0B (their count rounds; 12 l h^2 + V h + s h)
    ("llama3-8b", 8.030e9),  # released config: 8,030,261,248
    ("llama3-70b", 70.554e9),  # 70,553,706,496
    ("llama3-405b", 405.853e9),
    ("xxl-ffn", 219.85e9),  # seed 002: 126 x 2 x 16384 x 53248 = 219.8B
])
def test_preset_parameter_counts(name, expected):
    assert params(load_preset(name)) == pytest.approx(expected, rel=1e-3)


def test_seed_benchmark_presets_have_the_seed_shapes():
    shapes = {n: (m.hidden_size, m.ffn_hidden_size, m.num_layers, m.num_heads)
              for n in ("small", "medium", "large", "xl", "2.7b") for m in [load_preset(n)]}
    assert shapes == {"small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16),
                      "large": (1280, 5120, 36, 20), "xl": (1600, 6400, 48, 25), "2.7b": (2560, 10240, 32, 32)}
    assert all(load_preset(n).vocab_size == 10000 and load_preset(n).max_seq_len == 512 for n in shapes)


def test_every_preset_loads_and_names_a_source():
    for name in preset_names():
        assert load_preset(name).source


@pytest.mark.parametrize("config, expected_params", [
    ("gpt2.json", 124_439_808),  # GPT-2 small, as Hugging Face counts it
    ("gpt-neox-20b.json", 20_554_567_680),  # GPT-NeoX-20B
    ("llama-3-8b.json", 8_030_261_248),
])
def test_hf_configs_give_the_published_parameter_counts(data_dir, config, expected_params):
    assert params(resolve_model(str(data_dir / "hf" / config))) == expected_params


def test_bloom_config_style(data_dir):
    model = resolve_model(str(data_dir / "hf" / "bloom-7b1.json"))
    assert (model.hidden_size, model.num_layers, model.num_heads, model.ffn_hidden_size) == (4096, 30, 32, 16384)
    assert model.tied_embeddings and model.position_embedding == "alibi"
    assert params(model) == pytest.approx(7.069e9, rel=1e-4)


def test_llama_style_is_gqa_swiglu(data_dir):
    model = resolve_model(str(data_dir / "hf" / "llama-3-8b.json"))
    assert (model.num_kv_heads, model.kv_dim, model.ffn_activation) == (8, 1024, "swiglu")


def test_unknown_preset_suggests_close_names():
    with pytest.raises(AutotuneError) as err:
        load_preset("gpt3-17b")
    assert err.value.field == "model" and "gpt3-175b" in str(err.value)


def test_malformed_and_unreadable_configs(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(AutotuneError, match="not valid JSON"):
        resolve_model(str(bad))
    with pytest.raises(AutotuneError, match="cannot read"):
        resolve_model(str(tmp_path / "missing.json"))
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "vocab_size": 10}))
    with pytest.raises(AutotuneError, match="num_hidden_layers"):
        resolve_model(str(bad))


@pytest.mark.parametrize("changes, field", [
    ({"num_heads": 7}, "model.num_heads"),
    ({"hidden_size": 0}, "model.hidden_size"),
    ({"num_layers": -2}, "model.num_layers"),
    ({"num_kv_heads": 5}, "model.num_kv_heads"),
    ({"ffn_activation": "tanh"}, "model.ffn_activation"),
])
def test_invalid_shapes_name_the_field(changes, field):
    base = dict(name="m", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
                ffn_activation="gelu", vocab_size=100, max_seq_len=128, tied_embeddings=False)
    with pytest.raises(AutotuneError) as err:
        ModelSpec(**{**base, **changes})
    assert err.value.field == field


def test_hardware_data_loads_with_sources():
    for name in device_names():
        device = load_device(name)
        assert device.provenance and all(t.source for t in device.tiers)
        assert all(r.source for r in device.compute.values() if r is device.compute.get(("gemm", "bf16")))
    for name in cluster_names():
        cluster = load_cluster(name)
        assert cluster.intra_node.source and cluster.inter_node.source and cluster.host_link.source


def test_cluster_gpu_counts():
    cluster = load_cluster("dgx-h100")
    for ok in (1, 2, 8, 16, 1024):
        cluster.check_gpus(ok)
    for bad in (0, 12, -8):
        with pytest.raises(AutotuneError):
            cluster.check_gpus(bad)


def test_unknown_cluster_and_device():
    with pytest.raises(AutotuneError, match="dgx-h100"):
        load_cluster("dgx-h10")
    with pytest.raises(AutotuneError, match="unknown device"):
        load_device("tpu-v5")
