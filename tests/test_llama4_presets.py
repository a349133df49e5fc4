"""The Llama 4 presets: what autotune's config reader builds from their config.json, and what
transformers builds from the same file (its text model, on the meta device)."""

from __future__ import annotations

import json

import pytest

from autotune.spec.hf_config import model_from_hf_config
from autotune.spec.presets import load_preset

PRESETS = {"llama4-scout-17b-16e": "llama-4-scout-17b-16e.json", "llama4-maverick-17b-128e": "llama-4-maverick-17b-128e.json"}


@pytest.mark.parametrize("name, file", PRESETS.items())
def test_llama4_presets_are_their_configs(data_dir, name, file):
    preset, read = load_preset(name), model_from_hf_config(data_dir / "hf_configs" / file)
    assert preset.with_changes(name="x", source="") == read.with_changes(name="x", source="")


def test_scout_is_moe_on_every_layer_and_maverick_alternates():
    scout, maverick = load_preset("llama4-scout-17b-16e"), load_preset("llama4-maverick-17b-128e")
    assert scout.num_moe_layers == 48 and maverick.num_moe_layers == 24
    assert [maverick.is_moe_layer(i) for i in range(4)] == [False, True, False, True]  # moe_layers 1, 3, ..., 47
    for model in (scout, maverick):  # chunks of 8192 on 3 of every 4 layers, full attention on the 4th
        assert [model.is_windowed_layer(i) for i in range(8)] == [True, True, True, False] * 2
        assert (model.window_kind, model.sliding_window, model.num_shared_experts, model.router) == \
            ("chunked", 8192, 1, "topk_sigmoid")
    # the model card's 109B / 400B total (with the vision tower) and 17B active
    assert (scout.num_parameters(), scout.num_active_parameters()) == (107_769_861_120, 17_172_894_720)
    assert (maverick.num_parameters(), maverick.num_active_parameters()) == (400_711_848_960, 17_184_691_200)
    assert (scout.qk_norm, maverick.qk_norm, scout.rope_scaling, maverick.rope_scaling) == ("l2", "none", "llama3", "none")


def test_a_chunked_layer_caches_one_chunk():
    scout = load_preset("llama4-scout-17b-16e")
    assert scout.cached_positions(32768) == pytest.approx(0.75 * 8192 + 0.25 * 32768)


@pytest.mark.slow
def test_maverick_counts_equal_transformers(data_dir):
    """The stored Maverick config built by transformers (text model, meta device), as
    tests/test_hf_configs.py does for the hub's other files."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    data = json.loads((data_dir / "hf_configs" / "llama-4-maverick-17b-128e.json").read_text())
    keys = {k: v for k, v in data.items() if k not in ("_comment", "model_type")}
    config = transformers.AutoConfig.for_model("llama4", **keys).get_text_config()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    active = total - experts * (128 - 1) // 128
    read = model_from_hf_config(data_dir / "hf_configs" / "llama-4-maverick-17b-128e.json")
    assert (read.num_parameters(), read.num_active_parameters()) == (total, active)
