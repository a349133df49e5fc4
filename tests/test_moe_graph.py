"""MoE operator graphs: parameter totals (all and active) and FLOPs against hand-counted formulas."""

import pytest

from autotune.graph import layer_graph, model_tables, operators
from moe_models import MIXTRAL_8X7B, tiny_moe


def test_mixtral_parameter_counts_match_the_paper():
    tables = model_tables(MIXTRAL_8X7B, 4096, 2)
    assert tables.num_params == pytest.approx(46.7e9, rel=0.005)  # Mixtral paper: 46.7B
    assert tables.num_active_params == pytest.approx(12.9e9, rel=0.005)  # 12.9B active


def test_dense_shared_and_routed_params_add_up():
    m = tiny_moe()
    h, v, f, e, k = 64, 256, 128, 4, 2
    attn = h * (h + 2 * 2 * 16) + h * h + 2 * h  # q, k, v (2 KV heads of 16), out; two RMS norms
    dense_ffn = 3 * h * f
    routed = e * 3 * h * 32
    moe_ffn = h * e + 3 * h * 32 + routed  # router, one shared expert, routed experts
    tables = model_tables(m, 128, 2)
    expected = attn * 4 + dense_ffn + 3 * moe_ffn + 2 * v * h + h
    assert tables.layer_counts() == (1, 3)
    assert tables.num_params == expected
    assert tables.num_active_params == expected - 3 * routed * (1 - k / e)


def test_moe_layer_frequency_and_first_dense():
    m = tiny_moe(num_layers=6, first_k_dense_layers=2, moe_layer_frequency=2)
    tables = model_tables(m, 128, 2)
    assert [m.is_moe_layer(i) for i in range(6)] == [False, False, True, False, True, False]
    assert tables.layer_counts() == (4, 2)
    assert tables.layer_counts(3, 5) == (1, 1)


def test_routed_expert_flops_count_top_k_rows():
    m = MIXTRAL_8X7B
    s = 1024
    ops = {op.name: op for op in operators(layer_graph(m, s, 2, moe_layer=True))}
    assert ops["expert_up"].flops == 2.0 * s * 2 * 4096 * 2 * 14336
    assert ops["expert_down"].flops == 2.0 * s * 2 * 14336 * 4096
    assert ops["router"].flops == 2.0 * s * 4096 * 8
    # model FLOPs of a dense model of the active width equal the MoE model's, router aside
    dense = m.with_changes(num_experts=0, num_experts_per_token=0, ffn_hidden_size=2 * 14336)
    moe_flops = model_tables(m, s, 2).model_flops_per_sequence()
    dense_flops = model_tables(dense, s, 2).model_flops_per_sequence()
    assert moe_flops - dense_flops == pytest.approx(3 * 32 * 2.0 * s * 4096 * 8, rel=1e-9)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b",
                                  "olmoe-1b-7b", "gpt-oss-120b", "gpt-oss-20b"])
def test_graph_counts_equal_the_spec_counts_for_moe_presets(name):
    from autotune.spec.presets import load_preset
    model = load_preset(name)
    tables = model_tables(model, 1024, 2)
    assert tables.num_params == model.num_parameters()
    assert tables.num_active_params == model.num_active_parameters()


def test_shared_expert_gate_is_in_the_graph():
    gated = tiny_moe(shared_expert_gate=True)
    assert model_tables(gated, 128, 2).num_params == gated.num_parameters()
    assert model_tables(gated, 128, 2).num_params - model_tables(tiny_moe(), 128, 2).num_params == 3 * 64


@pytest.mark.parametrize("file", ["llama-4-scout-17b-16e.json", "gemma-3-27b.json"])
def test_graph_counts_equal_the_spec_counts_for_published_configs(data_dir, file):
    """Llama 4's shared expert, sigmoid router and weightless QK norm; Gemma 3's QK norms and sandwich norms."""
    from autotune.spec.hf_config import model_from_hf_config
    model = model_from_hf_config(data_dir / "hf_configs" / file)
    tables = model_tables(model, 1024, 2)
    assert (tables.num_params, tables.num_active_params) == (model.num_parameters(), model.num_active_parameters())
