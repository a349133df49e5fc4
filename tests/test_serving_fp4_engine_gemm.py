"""vLLM and SGLang price their NVFP4 linears on Blackwell at their own measured fits
(regressions.serving_gemm_<engine>), TensorRT-LLM at its own, MLPerf's harness (TensorRT's own FP4 GEMM, unmeasured) at the
fastest linear measured on the device."""

from __future__ import annotations

import pytest

from autotune.cost.serving_step import ReplicaShape, serving_cluster, step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


@pytest.mark.parametrize(("preset", "fit"), [("vllm-0.8", "vllm"), ("vllm-0.9", "vllm"), ("vllm", "vllm"),
                                              ("sglang", "sglang"), ("sglang-0.4", "sglang"), ("mlperf-nvidia-4.1", "best_measured"),
                                              ("mlperf-nvidia-5.1", "best_measured"), ("tensorrt-llm-1.0", "linear")])
def test_presets_name_their_engines_fit(preset, fit):
    assert load_runtime(preset).serving.nvfp4_gemm_fit == fit


@pytest.mark.parametrize("name", ["dgx-b200", "gb200-nvl72"])
def test_vllm_nvfp4_step_prices_its_own_linear(name):
    """A 70B NVFP4 prefill step of 4096 tokens on one Blackwell GPU under vLLM: slower than the square
    sweep says, faster than TensorRT-LLM's linear, and equal to a step whose device carries vLLM's fit as
    its GEMM fit."""
    model, cluster = resolve_model("llama3-70b"), load_cluster(name).for_gpus(1)
    kw = dict(weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=4096, max_sampled=1)
    fit = load_runtime("vllm").serving.nvfp4_gemm_fit
    vllm = step_model(model, cluster, ReplicaShape(tp=1), nvfp4_gemm_fit=fit, **kw)
    sweep = step_model(model, cluster, ReplicaShape(tp=1), nvfp4_gemm_fit="sweep", **kw)
    trt = step_model(model, cluster, ReplicaShape(tp=1), nvfp4_gemm_fit="linear", **kw)
    assert sweep.linear_s[4096] < vllm.linear_s[4096] < trt.linear_s[4096]
    own = cluster.device.compute[("serving_gemm_vllm", "nvfp4")]
    by_hand = cluster.with_changes(device=cluster.device.with_changes(
        compute={**cluster.device.compute, ("gemm", "nvfp4"): own}))
    assert serving_cluster(cluster, "vllm").device.regression("gemm", "nvfp4") is own
    assert vllm.linear_s[4096] == pytest.approx(
        step_model(model, by_hand, ReplicaShape(tp=1), nvfp4_gemm_fit="sweep", **kw).linear_s[4096])


def test_engine_fits_price_their_moe_experts_and_leave_other_devices_alone():
    """SGLang's NVFP4 experts on B200 at its own MoE fit: a 30B-A3B prefill step of 4096 tokens is
    faster than under TensorRT-LLM's fits (SGLang measured 0.75 of its MoE time) and slower than the sweep."""
    b200 = load_cluster("dgx-b200")
    served = serving_cluster(b200, "sglang").device
    assert served.compute[("expert_gemm", "nvfp4")] is b200.device.compute[("serving_moe_gemm_sglang", "nvfp4")]
    assert served.regression("gemm", "nvfp4") is b200.device.compute[("serving_gemm_sglang", "nvfp4")]
    model, one = resolve_model("qwen3-30b-a3b"), b200.for_gpus(1)
    kw = dict(weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=4096, max_sampled=1)
    steps = {fit: step_model(model, one, ReplicaShape(tp=1), nvfp4_gemm_fit=fit, **kw).linear_s[4096]
             for fit in ("sweep", "sglang", "linear")}
    assert steps["sweep"] < steps["sglang"] < steps["linear"]
    h100 = load_cluster("dgx-h100")  # no NVFP4 fits there: only vLLM's Marlin MoE ceiling (W4A16 experts)
    assert set(serving_cluster(h100, "vllm").device.compute) - set(h100.device.compute) == {("expert_gemm_w4a16", "bf16")}
    assert serving_cluster(h100, "sglang") is h100


@pytest.mark.parametrize(("name", "fastest"), [("dgx-b200", "serving_gemm_sglang"), ("gb200-nvl72", "serving_gemm_vllm")])
def test_best_measured_takes_the_fastest_engine_linear_for_dense_layers_only(name, fastest):
    """MLPerf's TensorRT engines without gemm_plugin: the dense linears at the device's fastest measured NVFP4
    linear (the lowest seconds per FLOP among its serving_gemm* fits), the MoE experts at the sweep."""
    cluster = load_cluster(name)
    device = serving_cluster(cluster, "best_measured").device
    fits = {c: f for (c, d), f in cluster.device.compute.items() if d == "nvfp4" and c.startswith("serving_gemm")}
    assert min(fits, key=lambda c: fits[c].seconds_per_unit) == fastest
    assert device.regression("gemm", "nvfp4") is fits[fastest]
    assert device.compute[("expert_gemm", "nvfp4")] is cluster.device.compute[("gemm", "nvfp4")]
    model, one = resolve_model("llama3-70b"), cluster.for_gpus(1)
    kw = dict(weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=4096, max_sampled=1)
    steps = {fit: step_model(model, one, ReplicaShape(tp=1), nvfp4_gemm_fit=fit, **kw).linear_s[4096]
             for fit in ("sweep", "best_measured", "linear")}
    assert steps["sweep"] < steps["best_measured"] < steps["linear"]


def test_best_measured_leaves_a_device_without_engine_fits_alone():
    h100 = load_cluster("dgx-h100")
    assert serving_cluster(h100, "best_measured") is h100
