"""Operator graphs: FLOPs, parameters and saved activations against hand-computed formulas."""

import networkx as nx
import pytest

from autotune.cost.compute import block_times
from autotune.cost.memory import sharded_state_bytes
from autotune.graph import layer_graph, model_tables, operators
from autotune.spec.hardware_data import load_device
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset

GPT = dict(name="gpt", num_layers=4, hidden_size=1024, num_heads=16, num_kv_heads=16, ffn_hidden_size=4096,
           ffn_activation="gelu", vocab_size=50000, max_seq_len=2048, tied_embeddings=True, dropout=True)
DEVICE = load_device("h100")


def saved_per_sequence(model, s, tp=1, sp=False, e=2, impl="unfused", recompute="none"):
    table = model_tables(model, s, e, impl).layer
    bt = block_times(table, DEVICE, "bf16", 1, tp, 1, sp)
    saved = float(bt.saved_bytes)
    return saved - float(bt.selective_saved_bytes) if recompute == "selective" else saved


@pytest.mark.parametrize("tp, sp", [(1, False), (4, False), (4, True), (8, True)])
def test_saved_activations_match_korthikanti(tp, sp):
    # Korthikanti et al. 2022, eqs. 1-4 (bytes, 16-bit, with dropout), b = 1 sequence:
    # no TP: s h (34 + 5 a s / h); TP: s h (10 + 24/t + 5 a s/(h t)); TP+SP: s h (34/t + 5 a s/(h t)).
    model = ModelSpec(**GPT)
    s, h, a = 2048, model.hidden_size, model.num_heads
    replicated = 34 / tp if sp else 10 + 24 / tp
    expected = s * h * (replicated + 5 * a * s / (h * tp)) if tp > 1 else s * h * (34 + 5 * a * s / h)
    assert saved_per_sequence(model, s, tp, sp) == pytest.approx(expected, rel=1e-12)


def test_selective_recompute_drops_the_attention_matrices():
    model = ModelSpec(**GPT)
    s, h, t = 2048, model.hidden_size, 8
    assert saved_per_sequence(model, s, t, True, recompute="selective") == pytest.approx(34 * s * h / t)


def test_seed_residual_stream_activation_of_2_7b():
    # Seed 002: the 2.7B model's residual stream at batch 4, context 512, fp32 is 20 MiB.
    model = load_preset("2.7b")
    table = model_tables(model, 512, 4, "flash").layer
    bt = block_times(table, DEVICE, "fp32", 4, 1, 1, False)
    norm_input = dict(zip(table.names, (table.saved_bytes * 4)))["attn_norm"]
    assert norm_input == 20 * 2**20
    assert float(bt.saved_bytes) > norm_input


def test_model_flops_match_megatron_72_form():
    # Narayanan et al. SC'21 eq. 3 without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    model = ModelSpec(**GPT)
    s, l, h, v = 2048, model.num_layers, model.hidden_size, model.vocab_size
    tables = model_tables(model, s, 2, "flash")
    expected = 72 * s * l * h**2 * (1 + s / (6 * h) + v / (12 * l * h))
    assert tables.model_flops_per_sequence() == pytest.approx(expected, rel=1e-12)


def test_layer_graph_is_a_dag_with_every_operator_kind():
    graph = layer_graph(load_preset("llama3-8b"), 4096, 2, "flash")
    assert nx.is_directed_acyclic_graph(graph)
    names = [op.name for op in operators(graph)]
    assert names[:3] == ["attn_norm", "qkv_proj", "attention"] and names[-1] == "ffn_residual"
    shardings = {op.sharding for op in operators(graph)}
    assert shardings == {"replicated", "column", "row", "split"}


def test_swiglu_has_three_matrices_and_gqa_narrows_kv():
    model = load_preset("llama3-8b")
    table = model_tables(model, 4096, 2, "flash").layer
    p = dict(zip(table.names, table.params))
    h, f, kv = 4096, 14336, 1024
    assert p["qkv_proj"] == h * (h + 2 * kv)
    assert p["ffn_up"] + p["ffn_down"] == 3 * h * f


def test_seed_xxl_memory_accounting():
    # Seed 002 communication_accounting (a): fp32 master weights, accumulated gradients and Adam
    # states for 126 blocks of d_model 16384 x d_ff 53248; activations (b=4, s=2048, bf16) of the
    # d_ff outputs; the answer counts GB as 2^30 bytes.
    model = load_preset("xxl-ffn")
    tables = model_tables(model, 2048, 2, "flash")
    params = tables.num_params
    assert params == 126 * 2 * 16384 * 53248
    weights, grads, optim = sharded_state_bytes(params, "fp32", 0, 1)
    assert weights / 2**30 == pytest.approx(819.0, abs=0.5)  # the seed rounds 219.6B x 4 B to 818.1
    assert (weights + grads + optim) / 2**30 == pytest.approx(3276, abs=2)
    table = tables.layer
    dff_out = dict(zip(table.names, table.saved_bytes))["ffn_down"] * 4  # batch 4
    activations = model.num_layers * dff_out
    assert activations / 2**30 == pytest.approx(102.1, rel=0.005)
    # (b): states and half the activations sharded over N, the other half replicated: the
    # smallest N under 95 GB (TPU v5p) is 76.
    def per_device(n):
        w, g, o = sharded_state_bytes(params, "fp32", 3, n)
        return w + g + o + activations / 2 / n + activations / 2
    assert min(n for n in range(1, 200) if per_device(n) < 95 * 2**30) == 76
