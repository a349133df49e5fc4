"""Profiles measured on real devices and shipped in autotune/data/devices (here the H100 one of
docs/h100-measured.md) load, carry their fits and price plans; no GPU needed."""

import json
from importlib import resources

import pytest

from autotune.cli.main import main
from autotune.spec.hardware_data import load_device, load_profile

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
