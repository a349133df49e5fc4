"""``evaluate`` and ``search`` say what they understood of the model: one line, and ``"model"`` in JSON."""

from __future__ import annotations

import json

from autotune.cli.main import main
from autotune.spec.presets import load_preset
from autotune.spec.summary import architecture_dict, architecture_line, format_count


def test_lines_name_layers_heads_experts_and_counts():
    assert architecture_line(load_preset("mixtral-8x7b")) == (
        "mixtral-8x7b: 32 layers, hidden 4096, 32/8 heads, head_dim 128, 8 experts top-2 (width 14336), "
        "46.7B params (12.9B active)")
    deepseek = architecture_line(load_preset("deepseek-v3"))
    assert "latent attention (q rank 1536, kv rank 512" in deepseek and "+ 1 shared in 58 of 61 layers" in deepseek
    assert deepseek.endswith("671.0B params (37.6B active)")
    assert architecture_line(load_preset("llama3-8b")).endswith("FFN 14336, 8.0B params")
    assert "FFN-only" in architecture_line(load_preset("xxl-ffn"))
    assert (format_count(124_439_808), format_count(999)) == ("124.4M", "999")
    gemma2 = load_preset("llama3-8b").with_changes(name="g", sliding_window=4096, sliding_window_every=2)
    assert ", window 4096 on 1 of every 2 layers," in architecture_line(gemma2)


def test_dict_carries_the_counts():
    d = architecture_dict(load_preset("qwen3-30b-a3b"))
    assert (d["num_parameters"], d["num_active_parameters"]) == (30_532_122_624, 3_353_032_704)
    assert (d["head_dim"], d["num_experts"], d["num_experts_per_token"]) == (128, 128, 8)


def test_evaluate_prints_the_line_and_json_carries_the_model(capsys, data_dir):
    config = str(data_dir / "hf_configs" / "falcon-7b.json")
    main(["evaluate", "--model", config, "--gpus", "8"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("falcon-7b: 32 layers, hidden 4544, 71/1 heads, head_dim 64") and "6.9B params" in first
    main(["evaluate", "--model", "mixtral-8x7b", "--gpus", "8", "--json"])
    model = json.loads(capsys.readouterr().out)["model"]
    assert (model["num_parameters"], model["num_active_parameters"]) == (46_702_792_704, 12_879_925_248)


def test_search_prints_the_line_and_json_carries_the_model(capsys):
    assert main(["search", "--model", "small", "--gpus", "2", "--no-run-dir", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("small: 12 layers, hidden 768, 12/12 heads")
    assert main(["search", "--model", "small", "--gpus", "2", "--no-run-dir", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert model["num_parameters"] == model["num_active_parameters"] == load_preset("small").num_parameters()
