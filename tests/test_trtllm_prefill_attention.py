"""TensorRT-LLM 1.0's measured prompt attention (ServingEngine.prefill_attention): its TRTLLM backend's FP8 context
FMHA as NVIDIA's aiconfigurator measured it (1.3.0rc20) prices the preset's grouped-query prompts as latency + a
prompt token's own work + the causal pairs; a row's third value is the per-token term, which two-value rows lack."""

from __future__ import annotations

import pytest

from autotune.cost.runtime_kernels import gpu_keys, runtime_cluster
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine


def _step(runtime: str, cluster: str, prefill: bool = True):
    rt = load_runtime(runtime)
    c = runtime_cluster(load_cluster(cluster).for_gpus(1), rt)
    spec = resolve_model("llama3-70b")  # 64 query / 8 KV heads of 128
    fit = rt.serving.prefill_attention_fit(gpu_keys(c.device.name), spec.head_dim) if prefill else None
    return step_model(spec, c, ReplicaShape(tp=1), weight_dtype="fp8", kv_bytes=1.0, max_tokens=8, max_sampled=8,
                      prefill_attention=fit)


def _prompt_layer_s(step, tokens: int) -> float:
    """One layer's attention over one causal prompt of ``tokens`` tokens, no cached prefix."""
    return step.prefill_lat_s + tokens * step.prefill_s_per_token + tokens * (tokens + 1) / 2 * step.prefill_s_per_pair


def test_a_row_may_carry_a_per_token_term_and_no_more():
    engine = ServingEngine(engine="tensorrt-llm", version="1.0.0", prefill_attention=[["b200", 128, 1e-5, 1e-15, 3e-12]])
    assert engine.prefill_attention_fit(("b200",), 128) == (1e-5, 1e-15, 3e-12)
    with pytest.raises(AutotuneError, match="serving.prefill_attention"):
        ServingEngine(engine="tensorrt-llm", version="1.0.0", prefill_attention=[["b200", 128, 1e-5, 1e-15, 3e-12, 1e-9]])


def test_the_per_token_term_scales_with_the_query_heads_a_gpu_runs():
    one, eight = (step_model(resolve_model("llama3-70b"), runtime_cluster(load_cluster("dgx-b200").for_gpus(tp),
                                                                             load_runtime("tensorrt-llm-1.0")),
                             ReplicaShape(tp=tp), weight_dtype="fp8", kv_bytes=1.0, max_tokens=8, max_sampled=8,
                             prefill_attention=(1e-5, 1e-15, 3e-12)) for tp in (1, 8))
    assert one.prefill_s_per_token == pytest.approx(3e-12 * 64 * 128)
    assert eight.prefill_s_per_token == pytest.approx(one.prefill_s_per_token / 8)
    assert _step("tensorrt-llm-1.0", "dgx-b200", prefill=False).prefill_s_per_token == 0.0  # generic: no such term


@pytest.mark.parametrize("cluster, measured_ms", [
    # aiconfigurator @095f58a5 {b200_sxm,h200_sxm}/attention/trtllm/1.3.0rc20/context_attention_perf.parquet: batch 1,
    # 64 / 8 heads of 128, FP8 context FMHA and KV, torch_flow, window 0; isl 1024 / 2048 / 8192 / 16384
    ("dgx-b200", (0.0562, 0.1143, 0.8777, 3.1358)),
    ("dgx-h200", (0.0739, 0.1764, 1.6243, 6.0982)),
])
def test_prompts_of_1k_to_16k_tokens_cost_what_tensorrt_llm_measured(cluster, measured_ms):
    step = _step("tensorrt-llm-1.0", cluster)
    for tokens, ms in zip((1024, 2048, 8192, 16384), measured_ms):
        assert 1e3 * _prompt_layer_s(step, tokens) == pytest.approx(ms, rel=0.2)
    generic = _step("tensorrt-llm-1.0", cluster, prefill=False)
    assert _prompt_layer_s(generic, 16384) > 1.25 * _prompt_layer_s(step, 16384)  # the generic fit: too slow at 16k
