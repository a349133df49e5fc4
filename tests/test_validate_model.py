"""The reference transformer: shapes, parameter counts against the operator graph, attention
implementations, meta-device construction and deterministic initialisation."""

import pytest

torch = pytest.importorskip("torch")

from autotune.errors import AutotuneError  # noqa: E402
from autotune.graph.table import model_tables  # noqa: E402
from autotune.spec.presets import load_preset, preset_names  # noqa: E402
from autotune.validate.model import build_model  # noqa: E402


def tiny(**changes):
    base = dict(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=96, vocab_size=101,
                max_seq_len=32, ffn_activation="swiglu")
    return load_preset("small").with_changes(**{**base, **changes})


def _plain(spec):
    """Presets the reference model builds: dense FFNs, standard attention (no experts, latent
    attention, QK norms, head_dim other than hidden / heads, or per-projection biases: it takes
    ``bias`` for every projection, so Qwen2's QKV-only biases are not built)."""
    own_biases = any(b is not None and b != spec.bias for b in (spec.qkv_bias, spec.attn_out_bias, spec.ffn_bias))
    return not (spec.is_moe or spec.is_mla or spec.qk_norm != "none" or spec.head_dim_size or own_biases)


@pytest.mark.parametrize("name", [n for n in preset_names()
                                  if load_preset(n).position_embedding != "alibi" and _plain(load_preset(n))])
def test_parameter_count_matches_the_operator_graph(name):
    spec = load_preset(name)
    model = build_model(spec, device="meta")
    assert sum(p.numel() for p in model.parameters()) == model_tables(spec, 128, 2).num_params


def test_torchtitan_structure_names():
    model = build_model(tiny(), device="meta")
    names = {n for n, _ in model.named_parameters()}
    for part in ("attention_norm.weight", "attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                 "attention.wo.weight", "ffn_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
                 "feed_forward.w3.weight"):
        assert f"layers.0.{part}" in names
    assert {"tok_embeddings.weight", "norm.weight", "output.weight"} <= names
    assert list(model.layers.keys()) == ["0", "1"]


def test_flash_and_unfused_attention_agree_under_gqa():
    spec = tiny()
    tokens = torch.randint(0, spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    flash = build_model(spec, attention_impl="flash")(tokens)
    unfused = build_model(spec, attention_impl="unfused")(tokens)
    assert flash.shape == (2, 16, spec.vocab_size)
    assert torch.allclose(flash, unfused, atol=1e-5)


def test_attention_is_causal():
    spec = tiny()
    model = build_model(spec)
    tokens = torch.randint(0, spec.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % spec.vocab_size
    assert torch.allclose(model(tokens)[0, :-1], model(changed)[0, :-1], atol=1e-6)


def test_meta_construction_then_init_equals_direct_build():
    spec = tiny(position_embedding="learned", tied_embeddings=True, norm="layernorm", bias=True, ffn_activation="gelu")
    direct = build_model(spec, seed=3)
    lazy = build_model(spec, device="meta", seed=3)
    assert all(p.is_meta for p in lazy.parameters())
    lazy.to_empty(device="cpu")
    lazy.init_weights(3)
    tokens = torch.randint(0, spec.vocab_size, (2, 8))
    assert torch.equal(direct(tokens), lazy(tokens))
    assert lazy.output.weight is lazy.tok_embeddings.weight


def test_seed_changes_weights_and_dropout_follows_spec():
    spec = tiny(dropout=True)
    a, b = build_model(spec, seed=0), build_model(spec, seed=1)
    assert not torch.equal(a.layers["0"].attention.wq.weight, b.layers["0"].attention.wq.weight)
    assert a.layers["0"].dropout.p == pytest.approx(0.1)
    assert build_model(spec, dropout_p=0.0).layers["0"].dropout.p == 0.0


def test_ffn_only_blocks_take_hidden_states():
    spec = load_preset("xxl-ffn").with_changes(num_layers=2, hidden_size=32, ffn_hidden_size=48)
    model = build_model(spec)
    assert model.tok_embeddings is None and model.output is None
    assert model(torch.randn(2, 5, 32)).shape == (2, 5, 32)


def test_bad_options_name_the_field():
    with pytest.raises(AutotuneError, match="attention_impl"):
        build_model(tiny(), attention_impl="fast")
    with pytest.raises(AutotuneError, match="position_embedding"):
        build_model(tiny(position_embedding="alibi"), device="meta")
    with pytest.raises(AutotuneError, match="dropout_p"):
        build_model(tiny(), dropout_p=1.5, device="meta")
