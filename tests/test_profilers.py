"""The torch micro-benchmarks (profilers/): timing, kernel sweeps, gloo collectives, a tiny
real profile end to end, mesh discovery on an injected topology, and the commands' errors."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from autotune.calibrate.fit import Measurement  # noqa: E402
from profilers import measure  # noqa: E402
from profilers.collectives import BackendError, CollectiveConfig, run_collectives  # noqa: E402
from profilers.kernels import (SweepConfig, _run_points, attention_sweep, bmm_sweep, gemm_sweep,  # noqa: E402
                               memory_sweep)
from profilers.timing import time_call  # noqa: E402

CPU = torch.device("cpu")
TINY = SweepConfig(device=CPU, warmup=1, repeats=3, gemm_shapes=((16, 32, 64), (32, 64, 64), (64, 64, 128), (64, 128, 128)),
                   attention_shapes=((1, 2, 32, 16), (1, 2, 64, 16)), memory_elements=(1024, 4096),
                   min_step_s=1e-4)


def run_cli(*args, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_time_call_repeats_and_reports_spread(clock):
    calls = []
    timing = time_call(lambda: calls.append(sum(range(1000))), device=CPU, warmup=2, repeats=5, clock=clock)
    assert timing.num_repeats == 5 and len(calls) == 7 and timing.mean_s > 0 and timing.std_s >= 0


def test_cpu_clock_leaves_out_sleeping():
    import time

    wall = time_call(lambda: time.sleep(0.01), device=CPU, warmup=0, repeats=2, clock="wall")
    cpu = time_call(lambda: time.sleep(0.01), device=CPU, warmup=0, repeats=2, clock="cpu")
    assert wall.mean_s >= 0.01 > 10 * cpu.mean_s


def test_gemm_sweep_counts_2mkn_flops_in_all_layouts():
    result = gemm_sweep(TINY, "fp32")
    assert not result.failures
    assert sorted(m.amount for m in result.measurements) == sorted(2.0 * m * k * n for m, k, n in TINY.gemm_shapes)
    assert {m.label.split()[-1] for m in result.measurements} == {"nt", "nn", "tn"}
    assert all(m.group == "gemm/fp32" and m.median_s > 0 for m in result.measurements)


@pytest.mark.parametrize("dtype, scaling", [("fp8", "tensorwise"), ("fp8_rowwise", "rowwise")])
def test_fp8_gemm_sweep_counts_2mkn_flops_with_its_scaling(dtype, scaling):
    result = gemm_sweep(TINY, dtype)
    assert not result.failures
    assert sorted(m.amount for m in result.measurements) == sorted(2.0 * m * k * n for m, k, n in TINY.gemm_shapes)
    assert all(m.group == f"gemm/{dtype}" and m.label.endswith(f"nt {scaling}") for m in result.measurements)


def test_profile_cli_takes_fp8_dtypes_for_gemms_only():
    import argparse

    from autotune.cli.profile_cmd import _dtypes

    assert _dtypes("bf16,fp8,fp8_rowwise") == ("bf16", "fp8", "fp8_rowwise")
    with pytest.raises(argparse.ArgumentTypeError):
        _dtypes("fp4")
    steps = [name for name, _, _ in measure.sweep_steps(("bf16", "fp8"))]
    assert steps == ["gemm/bf16", "gemm/fp8", "attention/bf16", "bmm/bf16", "memory"]


def test_attention_counts_causal_flops_forward_and_backward():
    result = attention_sweep(TINY, "fp32")
    fwd = {m.label.split()[0]: m.amount for m in result.measurements if m.label.endswith("fwd")}
    bwd = {m.label.split()[0]: m.amount for m in result.measurements if m.label.endswith("bwd")}
    assert fwd["1x2x64x16"] == 2.0 * 64 * 64 * 2 * 16  # half of 4 b s^2 h: causal
    assert bwd["1x2x64x16"] == pytest.approx(2.5 * fwd["1x2x64x16"])
    assert len(bmm_sweep(TINY, "fp32").measurements) == 2 * 2


def test_memory_sweep_separates_streaming_kernels():
    result = memory_sweep(TINY)
    groups = {m.group for m in result.measurements}
    assert groups == {"memory", "memory_check"}
    add = [m for m in result.measurements if m.label == "add 1024"][0]
    assert add.amount == 3 * 1024 * 4  # two reads and a write of fp32


def test_a_failing_point_is_reported_and_skipped():
    def broken():
        raise RuntimeError("out of memory (simulated)")

    points = [("bad", 1.0, broken), ("good", 2.0, lambda: (lambda: None))]
    result = _run_points(TINY, "gemm/fp32", points)
    assert [m.label for m in result.measurements] == ["good"]
    assert result.failures and "simulated" in result.failures[0]


def test_gloo_collectives_and_pairs():
    cfg = CollectiveConfig(backend="gloo", world_size=2, sizes_bytes=(4096, 65536), warmup=1, repeats=3,
                           ops=("all_reduce", "all_gather", "send_recv"), measure_pairs=True,
                           pair_sizes_bytes=(64, 65536))
    result = run_collectives(cfg)
    assert {(op, n) for op, n, _ in result.measurements} == {("all_reduce", 2), ("all_gather", 2), ("send_recv", 2)}
    assert all(isinstance(m, Measurement) and m.median_s > 0 for _, _, m in result.measurements)
    assert result.pair_latency_s[0][1] > 0 and result.pair_bandwidth[1][0] > 0


def test_backend_that_cannot_start_raises():
    with pytest.raises(BackendError, match="NCCL"):
        run_collectives(CollectiveConfig(backend="nccl", world_size=2, sizes_bytes=(4096,), warmup=1, repeats=1))


def test_mesh_discovery_on_an_injected_topology():
    """4 gloo processes; messages between {0,2} and {1,3} get 10 ms and 5 ns/byte more: two
    'nodes' with a slower link between them, though all four ranks share this machine."""
    node = {0: 0, 2: 0, 1: 1, 3: 1}
    cross = [[node[a] != node[b] for b in range(4)] for a in range(4)]
    delay = tuple(tuple(10e-3 if c else 0.0 for c in row) for row in cross)
    per_byte = tuple(tuple(5e-9 if c else 0.0 for c in row) for row in cross)
    cfg = CollectiveConfig(backend="gloo", world_size=4, sizes_bytes=(4096,), warmup=1, repeats=5, ops=(),
                           measure_pairs=True, pair_sizes_bytes=(64, 4 << 20), pair_delay_s=delay,
                           pair_s_per_byte=per_byte)
    result = run_collectives(cfg)
    from autotune.calibrate.mesh_discovery import discover_mesh
    import numpy as np

    mesh = discover_mesh(np.array(result.pair_latency_s), np.array(result.pair_bandwidth), tolerance=3.0)
    assert mesh.shape == (2, 2)
    order = mesh.rank_order
    assert {frozenset(order[:2]), frozenset(order[2:])} == {frozenset({0, 2}), frozenset({1, 3})}
    assert mesh.levels[1].latency_s > 2e-3


@pytest.fixture
def tiny_profile(capsys, tmp_path, monkeypatch):
    """A real profile of this machine with tiny sweeps (seconds), written by the CLI code path.

    Tiny kernels on a shared 2-core machine are noise, so the fit limits are opened: this
    checks the plumbing; test_fit.py checks the fits and their refusals deterministically."""
    from autotune.calibrate import profile_io
    from autotune.calibrate.fit import FitLimits

    real_build = profile_io.build_profile
    lenient = FitLimits(min_points=2, max_point_cv=100.0, max_residual_rel_std=100.0, min_r2=-1e9)
    monkeypatch.setattr(profile_io, "build_profile", lambda data: real_build(data, lenient))
    tiny = SweepConfig(**{**TINY.__dict__, "memory_elements": (1 << 12, 1 << 14, 1 << 16, 1 << 18)})
    monkeypatch.setattr(measure, "sweep_config", lambda device, quick, clock: SweepConfig(**{**tiny.__dict__, "clock": clock}))
    real = measure.collective_configs
    monkeypatch.setattr(measure, "collective_configs", lambda options, backend: [
        CollectiveConfig(**{**cfg.__dict__, "sizes_bytes": (4096, 16384, 65536, 262144), "repeats": 3,
                            "ops": ("all_reduce", "send_recv")}) for cfg in real(options, backend)])
    from autotune.cli.main import main

    path = tmp_path / "cpu.json"
    assert main(["profile", "--quick", "--out", str(path), "--world-sizes", "2", "--dtypes", "fp32"]) == 0
    return path


def test_tiny_profile_end_to_end(tiny_profile, capsys):
    out = capsys.readouterr().out
    assert "gemm/fp32" in out and f"wrote {tiny_profile}" in out
    profile = json.loads(tiny_profile.read_text())
    assert profile["schema"] == "autotune.profile/1" and profile["device"]["kind"] == "cpu"
    assert profile["host"]["threads_per_process"] == 1 and profile["host"]["kernel_clock"] == "cpu"
    assert profile["fits"]["gemm/fp32"].get("r2") is not None or "refused" in profile["fits"]["gemm/fp32"]
    from autotune.cli.main import main

    assert main(["evaluate", "--model", "small", "--gpus", "2", "--cluster", "cpu", "--profile", str(tiny_profile),
                 "--dtype", "fp32", "--global-batch", "2", "--seq-len", "128"]) == 0
    assert "+-" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["profile", "--device", "tpu", "--quick"], "device"),
    (["profile", "--show", "/nonexistent/profile.json"], "profile"),
    (["profile", "--quick", "--clock", "cpu", "--threads", "2"], "--clock"),
    (["profile", "--quick", "--world-sizes", "1"], "--world-sizes"),
    (["profile", "--refit", "/nonexistent/profile.json"], "profile"),
])
def test_profile_bad_input_is_one_line_exit_2(args, needle, capsys):
    from autotune.cli.main import main

    try:
        code = main(args)
    except SystemExit as exit_:  # argparse errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_missing_cuda_is_one_line_exit_2_in_a_fresh_process():
    code, out, err = run_cli("profile", "--device", "cuda", "--quick")
    assert code == 2, err
    assert err.count("\n") == 1 and "device" in err and "Traceback" not in err


def test_benchmark_prints_measured_next_to_predicted():
    code, out, err = run_cli("benchmark", "--model", "small", "--seq-len", "32", "--backward", "--warmup", "1",
                             "--steps", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    for key in ("forward", "forward_backward"):
        assert data[key]["mean_s"] > 0 and data[key]["std_s"] >= 0 and data[key]["predicted_s"] > 0
    assert data["forward_backward"]["mean_s"] > data["forward"]["mean_s"]
    assert data["peak_memory_bytes"] > data["persistent_bytes"] > 0
