"""Profiles measured on real devices and shipped in autotune/data/devices (here the H100 one of
docs/h100-measured.md) load, carry their fits and price plans; no GPU needed."""

import json
from importlib import resources

import pytest

from autotune.cli.main import main
from autotune.spec.hardware_data import load_device, load_profile
from autotune.spec.presets import load_preset

H100 = str(resources.files("autotune.data").joinpath("devices", "h100-sxm-measured.json"))


def test_measured_h100_profile_loads_with_its_fits():
    profile = load_profile(H100)
    fits = profile["fits"]
    for name in ("gemm/bf16", "gemm/fp8", "gemm/fp8_rowwise", "attention/bf16", "memory"):
        assert fits[name]["r2"] >= 0.9 and fits[name]["num_points"] >= 4, name
    device = load_device("h100-measured")
    assert device.regression("gemm", "fp8").seconds_per_unit < device.regression("gemm", "bf16").seconds_per_unit
    # Measured rates stay below the datasheet's dense peaks (989 bf16, 1979 fp8 TFLOP/s).
    assert device.peak("bf16") < 989.4e12 and device.peak("fp8") < 1978.9e12
    assert 2.0e12 < device.tier("hbm").bandwidth_bytes_per_s < 3.35e12


def test_measured_h100_profile_prices_a_single_gpu_plan(capsys):
    argv = ["evaluate", "--model", "gpt3-1.3b", "--gpus", "1", "--cluster", "dgx-h100", "--json"]
    assert main(argv + ["--profile", H100]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    datasheet = json.loads(capsys.readouterr().out)
    assert measured["step_time_s"] > 0 and measured["step_time_s"] != pytest.approx(datasheet["step_time_s"], rel=1e-6)


H200 = str(resources.files("autotune.data").joinpath("devices", "h200-measured.json"))


def test_measured_h200_profile_fits_attention_backward_apart():
    profile = load_profile(H200)
    fits = profile["fits"]
    fwd, bwd = fits["attention/bf16"], fits["attention_bwd/bf16"]
    assert fwd["num_points"] == bwd["num_points"] == 7
    assert all(p["label"].endswith("fwd") for p in fwd["points"]) and all(p["label"].endswith("bwd") for p in bwd["points"])
    # one line through both passes left 38.9% RMS residuals (../shared/reference/gpu/profile.txt); apart, ~10% each
    assert fwd["residual_rel_std"] < 0.15 and bwd["residual_rel_std"] < 0.15
    device = load_device("h200-measured")
    assert device.regression("attention_bwd", "bf16").seconds_per_unit > device.regression("attention", "bf16").seconds_per_unit
    assert device.memory_bytes < 141e9 * 1.07 and 1.0 * 2**30 < device.reserved_bytes < 2.0 * 2**30


def test_refitting_the_measurements_gives_the_shipped_fits():
    from autotune.calibrate.profile_io import build_profile, profile_data
    profile = load_profile(H200)
    again = build_profile(profile_data(profile))
    for name in ("gemm/bf16", "attention/bf16", "attention_bwd/bf16", "memory"):
        assert again["fits"][name]["seconds_per_unit"] == pytest.approx(profile["fits"][name]["seconds_per_unit"])


def test_a_device_without_a_backward_line_prices_both_passes_with_one():
    from autotune.cost.compute import block_times
    from autotune.graph.table import model_tables
    measured = load_device("h200-measured")
    joint = measured.with_changes(compute={k: v for k, v in measured.compute.items() if k[0] != "attention_bwd"})
    assert joint.regression("attention_bwd", "bf16") is joint.regression("attention", "bf16")
    table = model_tables(load_preset("gpt3-1.3b"), 2048, 2).layer
    apart, one = (block_times(table, d, "bf16", 8, 1, 1, False) for d in (measured, joint))
    attention = table.kinds.index("attention")
    assert float(apart.fwd_ops_s[..., attention].sum()) == pytest.approx(float(one.fwd_ops_s[..., attention].sum()))
    assert float(apart.bwd_ops_s[..., attention].sum()) > float(one.bwd_ops_s[..., attention].sum())
