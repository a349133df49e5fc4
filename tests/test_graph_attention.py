"""Attention in the operator graph: explicit head_dim, GQA/MQA, biases, QK norms, sliding windows,
multi-head latent attention, and the KV cache they imply."""

from __future__ import annotations

import pytest

from autotune.cost.inference import decode_layer_table, kv_bytes_per_token_layer
from autotune.graph import model_tables
from autotune.graph.operators import attended_pairs, decode_attention
from autotune.spec.hf_config import model_from_hf_dict
from autotune.spec.presets import load_preset, preset_names


def _dense(model):
    """The model with its MoE layers turned into dense ones (the graph's MoE part is separate)."""
    return model.with_changes(num_experts=0, num_experts_per_token=0, expert_ffn_hidden_size=0,
                              num_shared_experts=0, shared_expert_ffn_hidden_size=0, first_k_dense_layers=0,
                              shared_expert_gate=False, mlp_only_layers=())


def _llama(**extra):
    return {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1000, **extra}


DENSE_VARIANTS = {
    "gemma2-sandwich-window": {**_llama(), "model_type": "gemma2", "head_dim": 96, "sliding_window": 256},
    "gemma-head-dim": {**_llama(), "model_type": "gemma", "head_dim": 128},
    "qwen3-qk-norm": {**_llama(), "model_type": "qwen3", "head_dim": 80},
    "olmoe-full-qk-norm-dense": {**_llama(), "model_type": "olmoe", "num_experts": 0, "num_experts_per_tok": 0},
    "qwen2-qkv-bias": {**_llama(), "model_type": "qwen2"},
    "llama-all-biases": _llama(attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    "falcon-mqa-one-norm": {"model_type": "falcon", "hidden_size": 512, "num_hidden_layers": 3,
                            "num_attention_heads": 8, "vocab_size": 1000},
    "bloom-embedding-norm": {"model_type": "bloom", "hidden_size": 256, "n_layer": 2, "n_head": 4, "vocab_size": 999},
    "deepseek-mla-dense": {**_llama(), "model_type": "deepseek_v3", "n_routed_experts": 0, "q_lora_rank": 96,
                           "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 48},
    "deepseek-mla-no-q-lora": {**_llama(), "model_type": "deepseek_v2", "n_routed_experts": 0, "q_lora_rank": None,
                               "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                               "v_head_dim": 48},
    "gemma3-qk-norm-5-to-1": {**_llama(), "model_type": "gemma3_text", "head_dim": 64, "sliding_window": 128},
    "llama4-l2-chunked-dense": {**_llama(), "model_type": "llama4_text", "head_dim": 64, "moe_layers": [],
                                "intermediate_size_mlp": 2048, "attention_chunk_size": 256},
}


@pytest.mark.parametrize("impl", ["flash", "unfused"])
def test_graph_parameters_equal_the_spec_for_dense_models(impl):
    models = [load_preset(n) for n in preset_names()]
    models = [_dense(m) if m.is_moe else m for m in models]
    models += [model_from_hf_dict(c, name=n) for n, c in DENSE_VARIANTS.items()]
    for model in models:
        assert model_tables(model, 256, 2, impl).num_params == model.num_parameters(), model.name


def test_explicit_head_dim_sets_projection_and_attention_widths():
    gemma = model_from_hf_dict({**_llama(), "model_type": "gemma", "head_dim": 128})  # 8 x 128 = 1024 != 512
    table = model_tables(gemma, 1024, 2, "flash").layer
    p = dict(zip(table.names, table.params))
    assert p["qkv_proj"] == 512 * (1024 + 2 * 2 * 128)
    assert p["out_proj"] == 1024 * 512
    flops = dict(zip(table.names, table.flops))["attention"]
    assert flops == pytest.approx(2.0 * (1024 + 1024) * 1024 * 1024 / 2)  # QK^T + AV over 1024 wide heads, causal


def test_multi_query_attention_narrows_k_and_v():
    falcon = model_from_hf_dict({"model_type": "falcon", "hidden_size": 512, "num_hidden_layers": 2,
                                 "num_attention_heads": 8, "vocab_size": 1000})
    table = model_tables(falcon, 128, 2, "flash").layer
    assert dict(zip(table.names, table.params))["qkv_proj"] == 512 * (512 + 2 * 64)  # no bias
    assert "ffn_norm" not in table.names and falcon.kv_cache_elements_per_token_per_layer() == 2 * 64


def test_sliding_window_attention_flops():
    base = model_from_hf_dict({**_llama(), "model_type": "mistral", "sliding_window": None})
    windowed = base.with_changes(sliding_window=1024)
    flops = lambda m, s: dict(zip(*[model_tables(m, s, 2, "flash").layer.__getattribute__(k)  # noqa: E731
                                    for k in ("names", "flops")]))["attention"]
    assert flops(windowed, 1024) == flops(base, 1024)  # within the window: plain causal
    s, w = 8192, 1024
    assert flops(windowed, s) / flops(base, s) == pytest.approx((s * w - w * w / 2) / (s * s / 2))
    alternating = windowed.with_changes(sliding_window_every=2)  # Gemma 2: half the layers
    assert attended_pairs(alternating, s) == pytest.approx((s * s / 2 + s * w - w * w / 2) / 2)
    # model FLOPs keep the twice-causal convention: equal to the executed FLOPs doubled
    table = model_tables(windowed, s, 2, "unfused").layer
    model_attn = sum(f for n, f in zip(table.names, table.model_flops) if n in ("attn_scores", "attn_context"))
    assert model_attn == pytest.approx(2 * flops(windowed, s))


def test_chunked_attention_and_full_layers_every_n():
    """Llama 4: 3 of 4 layers attend within chunks of w (w^2 / 2 pairs per chunk), the 4th fully;
    Gemma 3: 5 of 6 layers slide a window of w."""
    scout = model_from_hf_dict({**_llama(num_hidden_layers=8), "model_type": "llama4_text", "moe_layers": [],
                                "attention_chunk_size": 1024})
    s, w = 8192 + 512, 1024
    chunked = 8 * w * w / 2 + 512 * 512 / 2
    assert attended_pairs(scout, s) == pytest.approx(0.75 * chunked + 0.25 * s * s / 2)
    assert attended_pairs(scout, w) == w * w / 2  # one chunk: plain causal
    assert scout.cached_positions(8192.0) == pytest.approx(0.75 * 1024 + 0.25 * 8192)
    gemma3 = model_from_hf_dict({**_llama(num_hidden_layers=12), "model_type": "gemma3_text", "head_dim": 64,
                                 "sliding_window": w})
    assert attended_pairs(gemma3, s) == pytest.approx(10 / 12 * (s * w - w * w / 2) + 2 / 12 * s * s / 2)


def test_attention_sinks_and_router_bias_are_parameters():
    gpt_oss = load_preset("gpt-oss-20b")
    table = model_tables(gpt_oss, 256, 2, "flash")
    assert dict(zip(table.layer.names, table.layer.params))["attention"] == 64  # a sink per head
    assert dict(zip(table.moe_layer.names, table.moe_layer.params))["router"] == 2880 * 32 + 32
    unfused = model_tables(gpt_oss, 256, 2, "unfused").layer
    assert dict(zip(unfused.names, unfused.params))["softmax"] == 64


def test_latent_attention_operators_match_deepseek_v3():
    m = _dense(load_preset("deepseek-v3"))
    s = 4096
    table = model_tables(m, s, 2, "flash").layer
    p, f = dict(zip(table.names, table.params)), dict(zip(table.names, table.flops))
    h, a = 7168, 128
    assert p["qkv_proj"] == h * (1536 + 512 + 64)
    assert p["q_up"] == 1536 * a * 192 and p["kv_up"] == 512 * a * (128 + 128)
    assert p["out_proj"] == a * 128 * h and p["latent_norm"] == 1536 + 512
    assert f["q_up"] == 2.0 * s * 1536 * a * 192
    assert f["attention"] == pytest.approx(2.0 * (a * 192 + a * 128) * s * s / 2)
    # one layer's attention parameters, summed by hand from the released shapes above
    attention = sum(p[n] for n in ("qkv_proj", "latent_norm", "q_up", "kv_up", "out_proj"))
    assert attention == 187_107_328


def test_latent_attention_kv_cache_and_decode():
    m = load_preset("deepseek-v3")
    assert m.kv_cache_elements_per_token_per_layer() == 512 + 64
    assert kv_bytes_per_token_layer(m, 2) == 2 * 576
    gqa = load_preset("llama3-70b")
    assert kv_bytes_per_token_layer(gqa, 2) == 2 * 2 * 8 * 128
    ctx = 4096.0
    cost = decode_attention(m, ctx, 2)
    assert cost["flops"] == pytest.approx(2 * ctx * 128 * (2 * 512 + 64))  # absorbed form
    assert cost["in_bytes"] == pytest.approx((128 * 192 + 576 + ctx * 576) * 2)
    table = decode_layer_table(_dense(m), ctx, 2)
    assert dict(zip(table.names, table.in_bytes))["attention"] == pytest.approx(cost["in_bytes"])


def test_windowed_decode_reads_only_the_window():
    m = model_from_hf_dict({**_llama(), "model_type": "mistral", "sliding_window": 1024})
    short, long = decode_attention(m, 512.0, 2), decode_attention(m, 8192.0, 2)
    assert long["flops"] == pytest.approx(short["flops"] * 1024 / 512)


def test_kv_cache_positions_and_tensor_parallel_shards():
    mistral = model_from_hf_dict({**_llama(), "model_type": "mistral", "sliding_window": 1024})
    assert (mistral.cached_positions(512.0), mistral.cached_positions(8192.0)) == (512.0, 1024.0)
    gemma2 = model_from_hf_dict({**_llama(), "model_type": "gemma2", "head_dim": 64, "sliding_window": 1024})
    assert gemma2.cached_positions(8192.0) == (8192 + 1024) / 2
    assert load_preset("llama3-70b").kv_cache_shards(8) == 8
    assert load_preset("deepseek-v3").kv_cache_shards(8) == 1  # the latent is read by every head


def test_inference_kv_cache_size_uses_the_latent_and_the_window():
    from autotune.search.evaluate import evaluate
    from autotune.spec.resolve import inference_workload

    def kv_per_gpu(model, tp):
        workload = inference_workload(model, "decode", batch=8, prompt_len=2048, output_len=64, dtype="bf16",
                                      attention="flash")
        estimate = evaluate(model, tp, workload=workload, tp=tp)
        return estimate.inference.kv_cache_bytes_per_gpu, estimate.inference.kv_cache_bytes

    ds = _dense(load_preset("deepseek-v3")).with_changes(num_layers=4, vocab_size=1024)
    per_gpu, total = kv_per_gpu(ds, 2)
    assert total == 8 * (2048 + 64) * 4 * 576 * 2 and per_gpu == total  # replicated on both TP ranks
    mistral = model_from_hf_dict({**_llama(), "model_type": "mistral", "sliding_window": 1024,
                                  "max_position_embeddings": 4096})
    assert kv_per_gpu(mistral, 1)[1] == 8 * 1024 * 4 * 2 * 2 * 64 * 2  # 4 layers, 2 KV heads of 64, bf16
