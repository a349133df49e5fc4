"""NVIDIA's MLPerf v5.0 / v5.1 engines build with FP8 context FMHA (use_fp8_context_fmha): their presets price a
prompt's attention with TensorRT-LLM's measured FP8 context attention, the rows tensorrt-llm-1.0 takes, where 4.1's
preset (no such row) keeps the device's generic fit. Llama 3.1 405B at TP 4 (32 query / 2 KV heads a GPU) on B200."""

from __future__ import annotations

import pytest

from autotune.cost.runtime_kernels import gpu_keys, runtime_cluster
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

# aiconfigurator @095f58a5 b200_sxm/attention/trtllm/1.3.0rc20/context_attention_perf.parquet: batch 1, 32 / 2 heads
# of 128, attn_dtype and kv_cache_dtype fp8, kernel_source torch_flow, window 0; ms a layer at isl 8192 / 10240 / 16384
MEASURED_MS = {8192: 0.557, 10240: 0.734, 16384: 1.559}


def _step(runtime: str):
    rt = load_runtime(runtime)
    c = runtime_cluster(load_cluster("dgx-b200").for_gpus(4), rt)
    spec = resolve_model("llama3-405b")
    fit = rt.serving.prefill_attention_fit(gpu_keys(c.device.name), spec.head_dim)
    return step_model(spec, c, ReplicaShape(tp=4), weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=8, max_sampled=8,
                      prefill_attention=fit)


def _prompt_layer_ms(step, tokens: int) -> float:
    return 1e3 * step.prefill_attention_s(tokens, tokens * (tokens + 1) / 2)


@pytest.mark.parametrize("runtime", ["mlperf-nvidia-5.0", "mlperf-nvidia-5.1"])
def test_405b_prompts_cost_what_tensorrt_llm_measured(runtime):
    step = _step(runtime)
    for tokens, ms in MEASURED_MS.items():
        assert _prompt_layer_ms(step, tokens) == pytest.approx(ms, rel=0.2)


def test_the_41_preset_keeps_the_generic_fit_too_slow_at_16k():
    assert _prompt_layer_ms(_step("mlperf-nvidia-4.1"), 16384) > 1.4 * MEASURED_MS[16384]
