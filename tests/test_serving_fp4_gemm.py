"""Blackwell NVFP4 in serving steps: weights carry their block scales, and linear layers run at the
serving-shape fit (regressions.serving_gemm) while training keeps the square-GEMM sweep."""

from __future__ import annotations

import pytest

from autotune.cost.serving_step import ReplicaShape, serving_cluster, step_model, weight_bytes_per_param
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model


def test_nvfp4_weights_carry_one_e4m3_scale_per_16():
    assert weight_bytes_per_param("nvfp4") == pytest.approx(0.5 + 1.0 / 16.0)
    assert weight_bytes_per_param("fp8") == 1.0  # per-tensor scales: one float per tensor


@pytest.mark.parametrize("name", ["dgx-b200", "gb200-nvl72"])
def test_serving_prices_nvfp4_gemms_at_the_serving_fit(name):
    cluster = load_cluster(name)
    served = serving_cluster(cluster, "linear").device
    assert served.regression("gemm", "nvfp4") is cluster.device.compute[("serving_gemm", "nvfp4")]
    # the training fit is untouched, and slower at serving shapes than the square sweep says
    assert cluster.device.regression("gemm", "nvfp4").seconds_per_unit < served.regression("gemm", "nvfp4").seconds_per_unit
    assert served.regression("gemm", "fp8") is cluster.device.regression("gemm", "fp8")


def test_devices_without_a_serving_fit_are_left_alone():
    cluster = load_cluster("dgx-h100")
    assert serving_cluster(cluster, "linear") is cluster
    b200 = load_cluster("dgx-b200")
    assert serving_cluster(b200, "sweep") is b200  # engines that run the sweep's rate


def test_fp4_decode_step_slower_with_the_serving_fit():
    """A 70B decode step of 256 requests on one B200: its GEMMs at the serving fit take longer than at
    the square sweep, and the weights it reads include the scales."""
    model, cluster = resolve_model("llama3-70b"), load_cluster("dgx-b200")
    kw = dict(weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=256, max_sampled=1)
    step = step_model(model, cluster.for_gpus(1), ReplicaShape(tp=1), nvfp4_gemm_fit="linear", **kw)
    before = step_model(model, cluster.for_gpus(1), ReplicaShape(tp=1), nvfp4_gemm_fit="sweep", **kw)
    assert step.linear_s[256] > 1.3 * before.linear_s[256]
    assert step.weight_bytes_per_gpu == before.weight_bytes_per_gpu
    # 68.5e9 linear weights at 4.5 bits (38.5 GB) and the BF16 embedding and head (4.2 GB); 4 bits alone: 38.4 GB
    assert step.weight_bytes_per_gpu > 42e9


def test_tensorrt_llm_1_0_runs_the_linear_fit_and_mlperf_the_best_measured():
    from autotune.spec.runtime import load_runtime

    assert load_runtime("tensorrt-llm-1.0").serving.nvfp4_gemm_fit == "linear"
    assert load_runtime("mlperf-nvidia-4.1").serving.nvfp4_gemm_fit == "best_measured"


def test_unknown_nvfp4_gemm_fit_is_refused():
    from autotune.errors import AutotuneError
    from autotune.spec.serving_engine import ServingEngine

    with pytest.raises(AutotuneError, match="nvfp4_gemm_fit"):
        ServingEngine(engine="vllm", version="0.9", nvfp4_gemm_fit="fast")


def test_moe_experts_run_at_the_grouped_gemm_fit_only_under_linear():
    """TensorRT-LLM's NVFP4 MoE layers price their grouped GEMMs with the device's serving_moe_gemm fit;
    an engine on the sweep keeps the square-GEMM fit for its experts too."""
    model, cluster = resolve_model("qwen3-30b-a3b"), load_cluster("dgx-b200").for_gpus(1)
    kw = dict(weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=4096, max_sampled=1)
    linear = step_model(model, cluster, ReplicaShape(tp=1), nvfp4_gemm_fit="linear", **kw)
    sweep = step_model(model, cluster, ReplicaShape(tp=1), nvfp4_gemm_fit="sweep", **kw)
    assert linear.linear_s[4096] > 1.3 * sweep.linear_s[4096]
    served = serving_cluster(cluster, "linear").device
    assert served.compute[("expert_gemm", "nvfp4")] is cluster.device.compute[("serving_moe_gemm", "nvfp4")]
    assert ("expert_gemm", "nvfp4") not in serving_cluster(cluster, "sweep").device.compute
