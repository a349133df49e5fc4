"""vLLM V1's measured prompt attention (ServingEngine.prefill_attention): its FlashAttention backend (FA3
on Hopper) as NVIDIA's aiconfigurator measured it under vLLM 0.14.0 on H100 and H200 prices the V1
presets' non-MLA prompts there; vLLM 0.6 (V0, FA2), other GPUs, the 0.33 preset and MLA prompts keep
the device's generic fit."""

from __future__ import annotations

import pytest

from autotune.cost.runtime_kernels import gpu_keys, runtime_cluster
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine

V1_PRESETS = ["vllm-0.8", "vllm-0.9", "vllm-0.9.2", "vllm-0.14", "vllm-0.20"]


def _step(runtime: str, model: str, cluster: str, tp: int, **shape):
    engine = load_runtime(runtime).serving
    c = runtime_cluster(load_cluster(cluster).for_gpus(tp), load_runtime(runtime))
    keys, spec = gpu_keys(c.device.name), resolve_model(model)
    return step_model(spec, c, ReplicaShape(tp=tp, **shape), weight_dtype="bf16", kv_bytes=2.0,
                      max_tokens=8, max_sampled=8, decode_attention=engine.decode_attention_fit(keys, 2.0),
                      prefill_attention=engine.prefill_attention_fit(keys, spec.head_dim))


def _prompt_layer_s(step, tokens: int) -> float:
    """One layer's attention over a single causal prompt of ``tokens`` tokens, no cached prefix."""
    return step.prefill_lat_s + tokens * (tokens + 1) / 2 * step.prefill_s_per_pair


@pytest.mark.parametrize("runtime", V1_PRESETS)
def test_v1_presets_state_the_prompt_op_on_hopper_only(runtime):
    serving = load_runtime(runtime).serving
    for gpu in ("H100-80GB", "H200-SXM-141GB"):
        for head_dim in (64, 128):
            assert serving.prefill_attention_fit(gpu_keys(gpu), head_dim) is not None
        assert serving.prefill_attention_fit(gpu_keys(gpu), 256) is None
    assert serving.prefill_attention_fit(gpu_keys("B200"), 128) is None


@pytest.mark.parametrize("runtime", ["vllm-0.6", "vllm"])
def test_v0_and_the_033_preset_keep_the_generic_fits(runtime):
    assert load_runtime(runtime).serving.prefill_attention_fit(gpu_keys("H100-80GB"), 128) is None


@pytest.mark.parametrize("cluster, measured_s", [("dgx-h100", 1.007e-3), ("dgx-h200", 1.017e-3)])
def test_an_8k_prompt_costs_what_vllm_measured(cluster, measured_s):
    """Llama 3 8B on one GPU (32 query / 8 KV heads), one 8,192-token prompt: aiconfigurator's row (batch 1,
    isl 8192, context_attention_perf.parquet 0.14.0) is 1.01 / 1.02 ms a layer on H100 / H200; the device's
    FlashAttention-2 fit over its kernel_efficiency gave about 1.95 ms."""
    measured = _prompt_layer_s(_step("vllm-0.9.2", "llama3-8b", cluster, 1), 8192)
    generic = _prompt_layer_s(_step("vllm-0.6", "llama3-8b", cluster, 1), 8192)
    assert measured == pytest.approx(measured_s, rel=0.1)
    assert generic > 1.6 * measured


def test_head_dim_64_runs_at_fa3s_measured_share_of_the_128_rate():
    """FA3 at head_dim 64 reaches 0.80 of its head_dim-128 FLOP rate on the same prompts (vLLM 0.24.0's
    tables): gpt-oss's prompt pairs cost that much more per FLOP than Llama's; generic pricing has no such
    head-dim term."""
    def per_flop(runtime, model):
        spec = resolve_model(model)
        return _step(runtime, model, "dgx-h100", 1).prefill_s_per_pair / (2 * (spec.q_width + spec.attn_out_width))
    ratio = per_flop("vllm-0.9.2", "gpt-oss-120b") / per_flop("vllm-0.9.2", "llama3-8b")
    assert ratio == pytest.approx(1 / 0.798, rel=0.01)
    assert per_flop("vllm-0.6", "gpt-oss-120b") == pytest.approx(per_flop("vllm-0.6", "llama3-8b"))


def test_prompt_time_splits_over_tp_as_heads_do():
    one, eight = (_step("vllm-0.9.2", "llama3-70b", "dgx-h100", tp) for tp in (1, 8))
    assert one.prefill_s_per_pair == pytest.approx(8 * eight.prefill_s_per_pair)


def test_mla_prompts_keep_the_generic_fit():
    """DeepSeek's MLA prompts run other kernels (head dims 192 / 128), not in the measured tables."""
    v1 = _step("vllm-0.9.2", "deepseek-v3", "dgx-h200", 8, ep=8)
    v0 = _step("vllm", "deepseek-v3", "dgx-h200", 8, ep=8)
    assert v1.prefill_s_per_pair == v0.prefill_s_per_pair and v1.prefill_lat_s == v0.prefill_lat_s


@pytest.mark.parametrize("rows", [
    [["h200", 128, 1e-5]],  # a value missing
    [["h200", 128, 1e-5, 2e-15], ["h200", 128, 2e-5, 2e-15]],  # the same GPU and head_dim twice
    [["h200", 128, 1e-5, 0.0]],  # no rate
    [["h200", 128, "fast", 2e-15]],
    [["h200", 1e-5, 2e-15, 1e-15]],  # no head_dim
])
def test_bad_prefill_rows_are_refused(rows):
    with pytest.raises(AutotuneError, match="prefill_attention"):
        ServingEngine(engine="vllm", version="0.9.2", prefill_attention=rows)
