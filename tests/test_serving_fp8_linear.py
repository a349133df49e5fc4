"""Hopper per-tensor FP8 serving steps as NVIDIA's MLPerf v5.0 engines run them (issue 31, mlph46): linear layers
at TensorRT-LLM's measured FP8 linear (regressions.serving_gemm.fp8, priced as measured) under a preset whose
fp8_gemm_fit says "linear", and the gated MLP's activation inside the up GEMM where a system's config builds with
gemm_swiglu_plugin; the v4.1 preset, training and block-scaled checkpoints keep the sweep."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_experts import EXPERT_GEMM_CLASS
from autotune.cost.serving_gemm_fits import fp8_linear_cluster
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine

_V50 = Path(__file__).parent / "data" / "mlperf_v5_0_nvidia.csv"


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-h200"])
def test_linear_takes_the_engine_fp8_fit_and_experts_keep_the_sweep(name):
    cluster = load_cluster(name)
    device = fp8_linear_cluster(cluster, "linear", False).device
    linear = cluster.device.compute[("serving_gemm", "fp8")]
    assert device.regression("gemm", "fp8") is linear and linear.in_engine
    assert device.compute[(EXPERT_GEMM_CLASS, "fp8")] is cluster.device.compute[("gemm", "fp8")]
    # the measured linear runs Llama-2-70B's fused gate/up GEMM at 1,536 tokens faster than the sweep over 0.84
    flops = 2.0 * 1536 * 57344 * 8192
    sweep = cluster.device.compute[("gemm", "fp8")]
    assert linear.latency_s + flops * linear.seconds_per_unit \
        < (sweep.latency_s + flops * sweep.seconds_per_unit) / cluster.device.kernel_efficiency


def test_sweep_block_scaled_and_unmeasured_devices_are_left_alone():
    h200, b200 = load_cluster("dgx-h200"), load_cluster("dgx-b200")
    assert fp8_linear_cluster(h200, "sweep", False) is h200
    assert fp8_linear_cluster(h200, "linear", True) is h200  # block-scaled FP8: serving_cluster's block-scale fits
    assert fp8_linear_cluster(b200, "linear", False) is b200  # no per-tensor engine fit measured there


def test_only_the_v50_preset_runs_the_linear_fit():
    assert load_runtime("mlperf-nvidia-5.0").serving.fp8_gemm_fit == "linear"
    for name in ("mlperf-nvidia-4.1", "mlperf-nvidia-5.1", "tensorrt-llm-1.0", "vllm", "sglang"):
        assert load_runtime(name).serving.fp8_gemm_fit == "sweep", name
    with pytest.raises(AutotuneError, match="fp8_gemm_fit"):
        ServingEngine(engine="vllm", version="0.9", fp8_gemm_fit="fast")


def test_gemm_swiglu_drops_the_activation_kernel_only():
    model, cluster = resolve_model("llama2-70b"), load_cluster("dgx-h200").for_gpus(1)
    kw = dict(weight_dtype="fp8", kv_bytes=1.0, max_tokens=1536, max_sampled=1)
    fused = step_model(model, cluster, ReplicaShape(tp=1), gemm_swiglu=True, **kw)
    plain = step_model(model, cluster, ReplicaShape(tp=1), **kw)
    # one SwiGLU a layer on 1,536 tokens: reads 2 x 28,672 and writes 28,672 BF16 values a token, ~3-4 ms at 4.3 TB/s
    saved_s = plain.linear_s[1536] - fused.linear_s[1536]
    assert 2e-3 < saved_s < 8e-3
    assert fused.weight_bytes_per_gpu == plain.weight_bytes_per_gpu


def _row(row_id: str) -> dict:
    with _V50.open() as f:
        return next(r for r in csv.DictReader(f) if r["id"] == row_id)


@pytest.mark.parametrize(("row_id", "swiglu"), [("mlp50-016", True), ("mlp50-036", True), ("mlp50-020", False),
                                                 ("mlp50-023", False)])
def test_v50_hopper_systems_fuse_swiglu_where_their_config_builds_it(row_id, swiglu):
    """H200 x8 and H100 PP2x4 llama2-70b (Offline, Server) set gemm_swiglu_plugin fp8; the H200
    llama2-70b-interactive and llama3.1-405b configs do not."""
    dep = case_from_row(_row(row_id)).deployment
    assert dep.runtime.serving.gemm_swiglu_fusion is swiglu
    assert dep.runtime.serving.fp8_gemm_fit == "linear"
