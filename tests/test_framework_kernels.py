"""The kernels each framework runs per GPU generation: the measurements (autotune/calibrate/framework_kernels.py)
behind the runtime presets' kernel speeds, applied by autotune/cost/runtime_kernels.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.calibrate.framework_kernels import IN_STEP_GEMM_MEASUREMENTS, PYTORCH_GEMM_IN_STEP_HOPPER
from autotune.cost.runtime_kernels import gpu_generation, runtime_cluster
from autotune.spec.hardware_data import load_cluster
from autotune.spec.runtime import Runtime, load_runtime

MEASURED_PROFILE = Path(__file__).resolve().parent.parent / "autotune" / "data" / "devices" / "h100-sxm-measured.json"


def _line_gemm_s(name: str, batch: int) -> float:
    """The measured profile's GEMM line over one fwd+bwd step's GEMMs (one forward, two backward per weight)."""
    from autotune.graph.table import model_tables
    from autotune.spec.presets import load_preset

    fit = json.loads(MEASURED_PROFILE.read_text())["fits"]["gemm/bf16"]
    model = load_preset(name)
    tables = model_tables(model, 2048, 2, "flash")
    total = 0.0
    for table, count in ((tables.layer, model.num_layers), (tables.embedding, 1), (tables.head, 1)):
        for kind, flops in zip(table.kinds, table.flops):
            if kind == "gemm":
                total += count * 3 * (fit["latency_s"] + batch * flops * fit["seconds_per_unit"])
    return total


@pytest.mark.parametrize("name, batch, measured_s, line_s", IN_STEP_GEMM_MEASUREMENTS)
def test_in_step_gemm_ratio_comes_from_the_measured_profile_line(name, batch, measured_s, line_s):
    # the line times stated beside the measured GEMM kernel times are the measured profile's fit
    assert _line_gemm_s(name, batch) == pytest.approx(line_s, rel=0.005)
    assert line_s < measured_s  # in a step, GEMMs run below the back-to-back line


def test_in_step_gemm_speed_is_the_mean_measured_ratio():
    ratios = [line / measured for _, _, measured, line in IN_STEP_GEMM_MEASUREMENTS]
    assert PYTORCH_GEMM_IN_STEP_HOPPER == pytest.approx(sum(ratios) / len(ratios))
    assert 0.75 < PYTORCH_GEMM_IN_STEP_HOPPER < 0.87


@pytest.mark.parametrize("gpu, generation", [
    ("H100-80GB", "hopper"), ("H100-SXM5-80GB", "hopper"), ("H100-96GB-HBM2e-500W", "hopper"), ("H200", "hopper"),
    ("A100-40GB", "other"), ("A100-SXM4-80GB", "other"), ("B200", "other"), ("GB200", "other")])
def test_gpu_generation_of_each_gpu_column(gpu, generation):
    assert gpu_generation(gpu) == generation


def gemm_in_step_speed(framework: str, gpu: str) -> float:
    return load_runtime(framework).gemm_speed(gpu_generation(gpu))


def _attention_scale(cluster: str, runtime: Runtime) -> float:
    """How much slower the runtime's attention kernels run than the device's fit on ``cluster``."""
    base = load_cluster(cluster)
    scaled = runtime_cluster(base, runtime)
    ratios = {scaled.device.compute[key].seconds_per_unit / fit.seconds_per_unit
              for key, fit in base.device.compute.items() if key[0] == "attention"}
    assert len(ratios) == 1, ratios
    return ratios.pop()


def test_kernel_speeds_depend_on_framework_and_generation():
    for framework in ("llm-foundry", "torchtitan"):
        # the presets state the measured mean to three places
        assert gemm_in_step_speed(framework, "H100-80GB") == pytest.approx(PYTORCH_GEMM_IN_STEP_HOPPER, abs=5e-4)
        assert gemm_in_step_speed(framework, "A100-80GB") == 1.0  # not measured there: the device's line
    for framework in ("nemo", "megatron", "deepspeed"):
        assert gemm_in_step_speed(framework, "H100-SXM5-80GB") == 1.0
        assert load_runtime(framework).attention_speed == 1.0
    # llm-foundry's Triton attention on every generation; torchtitan's SDPA is the device's FlashAttention-2
    foundry = load_runtime("llm-foundry")
    assert foundry.attention_speed < 1
    assert _attention_scale("dgx-a100-80gb", foundry) == pytest.approx(_attention_scale("dgx-h100", foundry))
    assert _attention_scale("dgx-h100", foundry) == pytest.approx(1 / foundry.attention_speed)
    assert load_runtime("torchtitan").attention_speed == 1.0


def test_framework_gemm_speed_scales_only_bf16_and_fp16_gemm_fits():
    base = load_cluster("dgx-h100")
    scaled = runtime_cluster(base, Runtime(name="slow-gemms", gemm_in_step_speed=(("hopper", 0.8),)))
    for key, fit in base.device.compute.items():
        expected = fit.seconds_per_unit / 0.8 if key[0] == "gemm" and key[1] in ("bf16", "fp16") else fit.seconds_per_unit
        assert scaled.device.compute[key].seconds_per_unit == pytest.approx(expected), key
    assert runtime_cluster(base, Runtime(name="neutral")) is base
    assert runtime_cluster(base, Runtime(name="other-gpus", gemm_in_step_speed=(("ampere", 0.8),))) is base


def _gemm_speed(run) -> float:
    """The in-step GEMM speed the run's runtime has on its cluster's GPU."""
    return run.runtime.gemm_speed(gpu_generation(load_cluster(run.cluster_name).device.name))


def test_pytorch_native_hopper_rows_price_slower_gemms(data_dir):
    from autotune.calibrate.published import check_runs, load_runs

    runs = {r.run_id: r for r in load_runs(data_dir / "modern_runs.csv")[0]}
    h100, a100, nemo = runs["llmf-030"], runs["llmf-210"], runs["nemo-2407-01"]
    assert _gemm_speed(h100) == pytest.approx(PYTORCH_GEMM_IN_STEP_HOPPER, abs=5e-4)
    assert _gemm_speed(a100) == 1.0 and _gemm_speed(nemo) == 1.0
    speed = _gemm_speed(h100)
    slow, fast = check_runs([h100, replace(h100, runtime=h100.runtime.with_changes(gemm_in_step_speed=()))])
    # a GEMM-bound step (MPT-13B, 4096 tokens per micro-batch) slows by most of the GEMM factor
    ratio = slow.estimate.step_time_s / fast.estimate.step_time_s
    assert 1.0 < ratio < 1.0 / speed
    assert ratio > 1.0 + 0.6 * (1.0 / speed - 1.0)
