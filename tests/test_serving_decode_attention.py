"""An engine's measured decode attention (ServingEngine.decode_attention): TensorRT-LLM's attention op
as aiconfigurator measured it on H100 and H200 prices grouped-query decode layers there (its latency, a
cost per sequence x KV head a GPU holds beyond the knee where the SMs fill, the K/V bytes at the stream fit);
other GPUs, other engines, MLA and DP attention keep the generic memory-bound pricing."""

from __future__ import annotations

import pytest

from autotune.cost.runtime_kernels import gpu_keys, runtime_cluster
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine


def _layer_s(step, batch: int, context: int) -> float:
    """One decode-attention layer of ``batch`` sequences of ``context`` cached positions each."""
    return step.decode_attention_s(batch, batch * context)


def _step(runtime: str, model: str, cluster: str, tp: int, kv_bytes: float = 2.0, **shape):
    engine = load_runtime(runtime)
    c = runtime_cluster(load_cluster(cluster).for_gpus(tp), engine)
    fit = engine.serving.decode_attention_fit(gpu_keys(c.device.name), kv_bytes)
    return step_model(resolve_model(model), c, ReplicaShape(tp=tp, **shape), weight_dtype="bf16", kv_bytes=kv_bytes,
                      max_tokens=8, max_sampled=8, decode_attention=fit)


@pytest.mark.parametrize("runtime", ["tensorrt-llm-0.14", "tensorrt-llm-0.17", "tensorrt-llm-0.19", "tensorrt-llm-1.0"])
def test_trtllm_presets_state_the_measured_op_on_hopper_and_1_0_on_blackwell(runtime):
    serving = load_runtime(runtime).serving
    for gpu in ("H100-SXM5-80GB", "H200-SXM-141GB"):
        for kv_bytes in (1.0, 2.0):
            latency_s, per_kv_head_s, knee = serving.decode_attention_fit(gpu_keys(gpu), kv_bytes)
            assert 5e-6 < latency_s < 15e-6 and 0 <= per_kv_head_s < 50e-9 and 64 <= knee <= 512
    # Blackwell rows (aiconfigurator's B200 / GB200 / B300 / GB300 tables) in the 1.0 preset, whose rows run there
    blackwell = serving.decode_attention_fit(gpu_keys("B200"), 2.0)
    assert (blackwell is None) == (runtime != "tensorrt-llm-1.0")
    assert load_runtime("vllm").serving.decode_attention_fit(gpu_keys("H200-SXM-141GB"), 2.0) is None


def test_measured_op_prices_small_decodes_at_its_floor_and_large_ones_at_the_bytes():
    """Llama 3.1 70B TP 4 on H200 (16 query / 2 KV heads a GPU): aiconfigurator measures ~15 us at batch 1
    and 700 positions, ~55 us at batch 128 (generation_attention_perf.parquet, 1.3.0rc20, between its 511
    and 1023 rows); the generic pricing gave 3 and 29 us, the fit 13 and 38 (its line misses the kernel's
    multi-block steps there by -31%)."""
    trt = _step("tensorrt-llm-0.14", "llama3-70b", "dgx-h200", 4)
    generic = _step("vllm", "llama3-70b", "dgx-h200", 4)
    assert 10e-6 < _layer_s(trt, 1, 700) < 16e-6 and _layer_s(generic, 1, 700) < 5e-6
    assert 1.2 * _layer_s(generic, 128, 700) < _layer_s(trt, 128, 700) < 60e-6
    # long contexts at large batch are bandwidth-bound: both within a few percent of the bytes' time
    assert _layer_s(trt, 256, 4096) == pytest.approx(_layer_s(generic, 256, 4096) * 0.84, rel=0.1)


def test_per_kv_head_cost_follows_the_heads_a_gpu_holds():
    """8B on one GPU holds 8 KV heads, 70B on 4 GPUs 2, 70B on 8 GPUs 1: the per-sequence term scales so."""
    heads = {tp: _step("tensorrt-llm-0.17", model, "dgx-h100", tp).decode_s_per_request
             for model, tp in (("llama3-8b", 1), ("llama3-70b", 4), ("llama3-70b", 8))}
    assert heads[1] == pytest.approx(4 * heads[4]) and heads[4] == pytest.approx(2 * heads[8])


def test_fp8_kv_takes_its_own_row():
    bf16, fp8 = (_step("tensorrt-llm-1.0", "llama3-70b", "dgx-h200", 4, kv_bytes=k) for k in (2.0, 1.0))
    assert fp8.decode_lat_s < bf16.decode_lat_s
    assert fp8.decode_s_per_position == pytest.approx(bf16.decode_s_per_position / 2)


def test_mha_keeps_the_generic_pricing():
    """Llama 2 13B (40 query and 40 KV heads): outside the fit's grouped-query rows."""
    trt = _step("tensorrt-llm-0.17", "llama2-13b", "dgx-h200", 1)
    generic = _step("vllm", "llama2-13b", "dgx-h200", 1)
    assert trt.decode_lat_s == generic.decode_lat_s and trt.decode_s_per_request == generic.decode_s_per_request


def test_mla_and_dp_attention_keep_the_generic_pricing():
    trt = _step("tensorrt-llm-1.0", "deepseek-v3", "dgx-h200", 8, kv_bytes=1.0, ep=8, attention_dp=True)
    generic = _step("vllm", "deepseek-v3", "dgx-h200", 8, kv_bytes=1.0, ep=8, attention_dp=True)
    assert trt.decode_lat_s == generic.decode_lat_s


@pytest.mark.parametrize("rows", [
    [["h200", "int8", 1e-5, 1e-8]],  # not a KV dtype
    [["h200", "bf16", 1e-5]],  # a value missing
    [["h200", "bf16", 1e-5, 1e-8], ["h200", "bf16", 2e-5, 1e-8]],  # the same GPU and dtype twice
    [["h200", "bf16", -1e-5, 1e-8]],
    [["h200", "bf16", 1e-5, 1e-8, -4]],  # a negative knee
    [["h200", "bf16", 1e-5, 1e-8, 2.5]],  # a knee counts sequences x KV heads
])
def test_bad_rows_are_refused(rows):
    with pytest.raises(AutotuneError, match="decode_attention"):
        ServingEngine(engine="tensorrt-llm", version="1.0", decode_attention=rows)


def test_blackwell_rows_price_llama_decodes_near_the_measured_op():
    """Llama 3.1 70B TP 4 on B200 (16 query / 2 KV heads a GPU), BF16 KV: aiconfigurator measures about 11 us at
    batch 1 and 52 us at batch 256, both at 1k positions (b200_sxm generation_attention_perf.parquet, 1.3.0rc20,
    the 1023 rows); the generic pricing runs well under the first."""
    trt = _step("tensorrt-llm-1.0", "llama3-70b", "dgx-b200", 4)
    generic = _step("vllm", "llama3-70b", "dgx-b200", 4)
    assert 9e-6 < _layer_s(trt, 1, 1024) < 14e-6 and _layer_s(generic, 1, 1024) < 5e-6
    assert _layer_s(trt, 256, 1024) == pytest.approx(51.8e-6, rel=0.1)  # the bytes dominate: generic near too


def test_knee_prices_large_batches_at_the_tables_per_sequence_cost():
    """GPT-OSS's 64 query / 8 KV heads of 64 on one B200, FP8 KV, 127 cached positions: aiconfigurator measures
    19.0 us at batch 128 and 83.7 us at batch 1,024 (b200_sxm generation_attention_perf.parquet, 1.3.0rc20);
    the straight line fitted on batch <= 512 priced the second at 58 us. With the knee both are within 10%."""
    step = _step("tensorrt-llm-1.0", "gpt-oss-120b", "dgx-b200", 1, kv_bytes=1.0)
    assert step.decode_knee_requests > 0
    assert _layer_s(step, 128, 127) == pytest.approx(19.0e-6, rel=0.1)
    assert _layer_s(step, 1024, 127) == pytest.approx(83.7e-6, rel=0.1)
    # below the knee a request adds only its K/V bytes
    assert _layer_s(step, 16, 127) - _layer_s(step, 8, 127) == pytest.approx(8 * 127 * step.decode_s_per_position)


def test_rows_without_a_knee_keep_the_straight_line():
    engine = ServingEngine(engine="tensorrt-llm", version="1.0", decode_attention=[["b200", "bf16", 1e-5, 4e-9]])
    assert engine.decode_attention_fit(gpu_keys("B200"), 2.0) == (1e-5, 4e-9, 0.0)
