"""transformers' in-step kernel speeds come from its own steps traced kernel by kernel on an H200 and
an H100 (calibrate/transformers_kernels.py), and SDPA's head-dim-256 speed from the kernel timed alone."""

import json
from pathlib import Path

import pytest

from autotune.calibrate.framework_kernels import head_dim_256_attention_speed
from autotune.calibrate.transformers_kernels import TRANSFORMERS_TRACED, kernel_class, transformers_in_step_speeds
from autotune.cost.compute import attention_head_dim_speed
from autotune.spec.resolve import resolve_cluster
from autotune.spec.runtime import load_runtime

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ROOT / "autotune" / "data" / "devices"
CONFIGS = ROOT / "tests" / "data" / "h200" / "hf"
TRACES = {"h200": [(ROOT / "tests/data/h200/check-2026-11-27/trace.json", "cases"),
                   (ROOT / "tests/data/h200/check-2026-11-27b/gpu_check.json", "traces")],
          "hopper": [(ROOT / "tests/data/h100/check-2026-11-27/trace.json", "cases")]}


def _traced(key: str) -> dict[str, dict[str, float]]:
    cases = {}
    for path, field in TRACES[key]:
        for name, case in json.loads(path.read_text())[field].items():
            totals: dict[str, float] = {}
            for kernel in case["summary"]:
                cls = kernel_class(kernel["name"])
                totals[cls] = totals.get(cls, 0.0) + kernel["total_us"] / 1e6
            cases[name] = totals
    return cases


@pytest.mark.parametrize("key", ["h200", "hopper"])
def test_the_class_seconds_are_the_traces(key):
    traced = _traced(key)
    for name, batch, seq_len, gemm_s, attention_s, memory_s in TRANSFORMERS_TRACED[key]:
        case = traced[f"tests/data/h200/hf/{name}.json:{batch}:{seq_len}"]
        assert case["gemm"] == pytest.approx(gemm_s, abs=1e-5) and case["memory"] == pytest.approx(memory_s, abs=1e-5)
        assert case["attention"] == pytest.approx(attention_s, abs=1e-5)


def test_kernel_names_fall_in_their_classes():
    assert kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26") == "attention"
    assert kernel_class("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "gemm"
    assert kernel_class("cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_32x6_tn_align1") == "gemm"
    assert kernel_class("void at::native::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>>") == "optimizer"
    assert kernel_class("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>") == "memory"


@pytest.mark.parametrize("key", ["h200", "hopper"])
def test_the_runtime_states_the_speeds_its_traces_give(key):
    speeds = transformers_in_step_speeds(str(DEVICES), str(CONFIGS), key)
    runtime = load_runtime("transformers")
    assert runtime.gemm_speed(key) == pytest.approx(speeds["gemm"], abs=5e-4)
    assert runtime.attention_in_step(key) == pytest.approx(speeds["attention"], abs=5e-4)
    assert runtime.memory_in_step(key) == pytest.approx(speeds["memory"], abs=5e-4)
    assert 0.7 < speeds["memory"] < 1.05 and 1.0 < speeds["gemm"] < 1.25


@pytest.mark.parametrize("key,path", [("h200", "tests/data/h200/check-2026-11-27b"),
                                      ("hopper", "tests/data/h100/check-2026-11-27b")])
def test_head_dim_256_runs_at_the_speed_timed_alone(key, path):
    speed = head_dim_256_attention_speed(json.loads((ROOT / path / "kernel_rates_sdpa.json").read_text()))
    for name in ("torch", "transformers"):
        assert load_runtime(name).head_dim_256_speed(key) == pytest.approx(speed, abs=5e-4)
    device = resolve_cluster("dgx-h200").device.with_changes(attention_head_dim_256_speed=speed)
    assert attention_head_dim_speed(device, 256.0) == pytest.approx(speed)
    assert attention_head_dim_speed(device, 128.0) == 1.0
    assert speed < attention_head_dim_speed(device, 192.0) < 1.0
    assert attention_head_dim_speed(device, 512.0) == pytest.approx(speed)  # held beyond 256


def test_h100_runs_predicted_before_they_ran_stay_within_ten_percent():
    # four transformers runs on one H100, predicted from the hopper speeds above before they ran
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check_report import build_report
    check = ROOT / "tests" / "data" / "h100" / "check-2026-11-27b"
    assert json.loads((check / "predicted.json").read_text())["made"].startswith("before the runs")
    records = [json.loads(line) for line in (check / "hf.jsonl").read_text().splitlines() if line.strip()]
    configs = {c["name"]: str(ROOT / c["config"]) for c in json.loads((check / "cases.json").read_text())}
    report = build_report(cluster="dgx-h100", validate_reports=[], hf_records=records, hf_configs=configs,
                          profile=str(DEVICES / "h100-sxm-measured.json"))
    summary = report["summary"]["profile"]
    assert summary["runs"] == 4 and summary["out_of_memory_predicted_to_fit"] == []
    assert summary["step_mae_pct"] < 6 and summary["step_worst_pct"] < 10 and summary["memory_worst_pct"] < 10


def test_a_datasheet_cluster_is_priced_from_the_lines_the_speeds_are_relative_to():
    from autotune.cost.runtime_kernels import reference_lines, runtime_cluster
    from autotune.spec.hardware_data import apply_profile, shipped_profile

    transformers = load_runtime("transformers")
    datasheet = resolve_cluster("dgx-h100")
    measured = apply_profile(datasheet, shipped_profile("h100-sxm-measured"))
    lines = reference_lines(datasheet, transformers).device
    for key in (("gemm", "bf16"), ("attention", "bf16"), ("attention_bwd", "bf16")):
        assert lines.regression(*key) == measured.device.regression(*key)
    assert lines.memory == measured.device.memory and lines.memory_kernels == measured.device.memory_kernels
    assert lines.peak_flops == datasheet.device.peak_flops and lines.tiers == datasheet.device.tiers  # only the lines
    # so the datasheet cluster and the measured profile price transformers' GEMMs alike
    gemm = [runtime_cluster(c, transformers).device.regression("gemm", "bf16").seconds_per_unit for c in (datasheet, measured)]
    assert gemm[0] == pytest.approx(gemm[1])
    # a measured profile is kept; a runtime whose speeds stand on the datasheet lines is not moved
    assert reference_lines(measured, transformers) is measured
    assert reference_lines(datasheet, load_runtime("megatron")) is datasheet
    # another H100 (96 GB, 500 W) is not the measured one
    other = datasheet.with_changes(device=datasheet.device.with_changes(aliases=("h100-96gb",)))
    assert reference_lines(other, transformers) is other
