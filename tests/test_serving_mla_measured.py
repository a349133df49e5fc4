"""An engine's measured MLA decode attention (ServingEngine.mla_decode_attention): TensorRT-LLM's and
SGLang's absorbed-form MLA decode op as aiconfigurator measured it on Hopper and Blackwell prices a
DeepSeek decode layer for the query heads a GPU runs: 1/tp of them under TP, all under DP attention
(each rank then runs 1/tp of the replica's sequences)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.runtime_kernels import gpu_keys
from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine

GPUS = ("H100-SXM5-80GB", "H200-SXM-141GB", "B200", "GB200", "B300", "GB300")


def _step(runtime: str, cluster: str, tp: int, **kw):
    dep = ServingDeployment(model=resolve_model("deepseek-v3"), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                            tp=tp, replicas=1, weight_dtype="fp8", **kw)
    return replica_step_model(dep, max_tokens=1, max_sampled=1)


def _layer_s(step, batch: int, context: int) -> float:
    return step.decode_lat_s + batch * context * step.decode_s_per_position + batch * step.decode_s_per_request


def test_trtllm_states_every_gpu_kv_dtype_and_head_count():
    serving = load_runtime("tensorrt-llm-1.0").serving
    for gpu in GPUS:
        for kv_bytes in (1.0, 2.0):
            for heads in (8, 16, 32, 64, 128):
                latency_s, per_sequence_s, per_position_s = serving.mla_decode_attention_fit(gpu_keys(gpu), kv_bytes, heads)
                assert 5e-6 < latency_s < 20e-6 and per_sequence_s < 1e-6 and 5e-11 < per_position_s < 1e-9
    assert serving.mla_decode_attention_fit(gpu_keys("A100-SXM4-80GB"), 2.0, 16) is None
    assert serving.mla_decode_attention_fit(gpu_keys("B200"), 2.0, 24) is None  # no such row: generic
    assert load_runtime("vllm").serving.mla_decode_attention_fit(gpu_keys("B200"), 2.0, 16) is None


def test_sglang_leaves_hoppers_fp8_cache_generic():
    serving = load_runtime("sglang").serving
    assert serving.mla_decode_attention_fit(gpu_keys("H200-SXM-141GB"), 1.0, 16) is None
    assert serving.mla_decode_attention_fit(gpu_keys("H200-SXM-141GB"), 2.0, 16) is not None
    assert serving.mla_decode_attention_fit(gpu_keys("B200"), 1.0, 16) is not None


def test_tp_runs_a_gpus_heads_over_every_sequence_and_dp_all_heads_over_its_share():
    """TP 8: 16 heads a GPU, the 16-head row whole; DP attention over 8 ranks: the 128-head row, its
    per-sequence and per-position costs an eighth (gpu_s counts the replica's sequences)."""
    serving = load_runtime("tensorrt-llm-1.0").serving
    tp = _step("tensorrt-llm-1.0", "dgx-b200", 8, ep=8)
    lat, per_sequence, per_position = serving.mla_decode_attention_fit(("b200",), 1.0, 16)
    assert (tp.decode_lat_s, tp.decode_s_per_request, tp.decode_s_per_position) == (lat, per_sequence, per_position)
    dp = _step("tensorrt-llm-1.0", "dgx-b200", 8, ep=8, attention_dp=True)
    lat, per_sequence, per_position = serving.mla_decode_attention_fit(("b200",), 1.0, 128)
    assert dp.decode_lat_s == lat and dp.decode_s_per_request == pytest.approx(per_sequence / 8)
    assert dp.decode_s_per_position == pytest.approx(per_position / 8)


def test_flashmla_at_128_heads_is_compute_bound_and_at_16_memory_bound():
    """H200, FP8 KV: a cached latent costs ~0.19 ns at 16 heads (576 B at ~3 TB/s) and ~0.38 ns at 128
    (128 heads x 2 x 1088 FLOPs at ~720 TFLOPS): per rank, DP attention's 128 heads cost about twice
    as much per position as TP 8's 16 heads, where a pure read would cost the same."""
    tp = _step("tensorrt-llm-1.0", "dgx-h200", 8, ep=8)
    dp = _step("tensorrt-llm-1.0", "dgx-h200", 8, ep=8, attention_dp=True)
    assert 1.6 < 8 * dp.decode_s_per_position / tp.decode_s_per_position < 2.4


def test_measured_op_is_dearer_than_the_generic_pricing_at_small_batches():
    """aiconfigurator's H200 FP8-KV 16-head rows: ~13-16 us a layer at batch 1-8 up to 1k positions;
    the generic pricing (vLLM has no row) puts a few microseconds there."""
    trt, generic = (_step(r, "dgx-h200", 8, ep=8) for r in ("tensorrt-llm-1.0", "vllm"))
    assert 12e-6 < _layer_s(trt, 8, 1024) < 20e-6
    assert _layer_s(generic, 8, 1024) < 0.7 * _layer_s(trt, 8, 1024)


@pytest.mark.parametrize("rows", [
    [["h200", "int8", 16, 1e-5, 1e-8, 1e-10]],  # not a KV dtype
    [["h200", "bf16", 16, 1e-5, 1e-8]],  # a value missing
    [["h200", "bf16", 16.5, 1e-5, 1e-8, 1e-10]],  # heads not a whole number
    [["h200", "bf16", 16, 1e-5, 1e-8, 1e-10], ["h200", "bf16", 16, 2e-5, 1e-8, 1e-10]],  # twice
    [["h200", "bf16", 16, -1e-5, 1e-8, 1e-10]],
])
def test_bad_rows_are_refused(rows):
    with pytest.raises(AutotuneError, match="mla_decode_attention"):
        ServingEngine(engine="tensorrt-llm", version="1.0", mla_decode_attention=rows)


def test_prompt_attention_takes_the_measured_context_op():
    """TP 8 on B200 (16 heads a GPU, FP8 KV): the 16-head context row whole; DP attention: the 128-head
    row, its per-token and per-pair costs an eighth. A prompt token's own cost enters gpu_s beside its pairs."""
    serving = load_runtime("tensorrt-llm-1.0").serving
    tp = _step("tensorrt-llm-1.0", "dgx-b200", 8, ep=8)
    lat, per_token, per_pair = serving.mla_prefill_attention_fit(("b200",), 1.0, 16)
    assert (tp.prefill_lat_s, tp.prefill_s_per_token, tp.prefill_s_per_pair) == (lat, per_token, per_pair)
    dp = _step("tensorrt-llm-1.0", "dgx-b200", 8, ep=8, attention_dp=True)
    lat, per_token, per_pair = serving.mla_prefill_attention_fit(("b200",), 1.0, 128)
    assert dp.prefill_s_per_token == pytest.approx(per_token / 8) and dp.prefill_s_per_pair == pytest.approx(per_pair / 8)
    kw = dict(decodes=0, context=0.0, prefill_tokens=1, sampled=1)
    with_token = tp.gpu_s(pairs=1.0, **kw)
    without = replace(tp, prefill_s_per_token=0.0).gpu_s(pairs=1.0, **kw)
    assert with_token - without == pytest.approx(tp.num_layers * tp.prefill_s_per_token)


def test_measured_prompt_attention_runs_at_the_tables_flop_rate():
    """An 8k-token prompt on H200 at TP 8 (16 heads a GPU, FP8 KV): 2 x 320 FLOPs a head and causal pair at
    ~710 TFLOPS (context_mla_perf.parquet, 1.3.0rc20), ~570 with each token's own work and the floor; the
    generic pricing's pairs take about twice as long."""
    trt, generic = (_step(r, "dgx-h200", 8, ep=8) for r in ("tensorrt-llm-1.0", "vllm"))
    pairs = 8192 * 8193 / 2
    rate = 16 * 640 * pairs / (trt.prefill_lat_s + 8192 * trt.prefill_s_per_token + pairs * trt.prefill_s_per_pair)
    assert 500e12 < rate < 650e12 and 650e12 < 16 * 640 / trt.prefill_s_per_pair < 780e12
    assert trt.prefill_s_per_pair < 0.6 * generic.prefill_s_per_pair


def _check_row(name: str, row_id: str) -> dict:
    with open(Path(__file__).parent / "data" / name, newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == row_id)


def test_a_row_naming_another_sglang_attention_backend_keeps_the_generic_pricing():
    """InferenceX's H200 recipe launches SGLang with --attention-backend flashinfer (not the fa3 the rows time);
    its B200 / B300 recipes name trtllm_mla, the measured backend."""
    flashinfer = case_from_row(_check_row("sglang_newer_check.csv", "sglnew-017")).deployment.runtime.serving
    assert flashinfer.mla_decode_attention == () and flashinfer.mla_prefill_attention == ()
    trtllm_mla = case_from_row(_check_row("inferencex_b300_check.csv", "ixb300-001")).deployment.runtime.serving
    assert trtllm_mla.mla_decode_attention == load_runtime("sglang").serving.mla_decode_attention != ()


def test_mla_of_another_geometry_keeps_the_generic_pricing():
    """The rows time DeepSeek-V3's heads (latent 512, rope 64, nope 128, V 128); a model with a smaller latent
    runs other work a position, so it stays generic."""
    model = resolve_model("deepseek-v3")
    other = replace(model, kv_lora_rank=256)
    dep = ServingDeployment(model=other, cluster=load_cluster("dgx-b200"), runtime=load_runtime("tensorrt-llm-1.0"),
                            tp=8, ep=8, replicas=1, weight_dtype="fp8")
    generic = ServingDeployment(model=other, cluster=load_cluster("dgx-b200"), runtime=load_runtime("vllm"),
                                tp=8, ep=8, replicas=1, weight_dtype="fp8")
    step, base = (replica_step_model(d, max_tokens=1, max_sampled=1) for d in (dep, generic))
    assert step.decode_lat_s == base.decode_lat_s and step.prefill_s_per_token == 0.0


def test_vllm_v1_hopper_prompts_take_its_measured_mla_context_op():
    """vLLM 0.8-0.20 presets on H200 at TP 8 (16 heads a GPU, BF16 KV): the measured 0.14.0 context op
    (FlashAttention on the expanded heads), about half the generic pricing's time at an 8k-token prompt;
    a GPU with no rows (B200) keeps the generic pricing."""
    serving = load_runtime("vllm-0.9.2").serving
    step = _step("vllm-0.9.2", "dgx-h200", 8)
    lat, per_token, per_pair = serving.mla_prefill_attention_fit(("h200",), 2.0, 16)
    assert (step.prefill_lat_s, step.prefill_s_per_token, step.prefill_s_per_pair) == (lat, per_token, per_pair)
    pairs = 8192 * 8193 / 2
    measured = lat + 8192 * per_token + pairs * per_pair
    generic = _step("vllm", "dgx-h200", 8)
    assert measured < 0.7 * (generic.prefill_lat_s + pairs * generic.prefill_s_per_pair)
    assert serving.mla_prefill_attention_fit(("b200",), 2.0, 16) is None
