"""Fits of measured times (autotune.calibrate.fit), the profiles built from them
(autotune.calibrate.profile_io) and how a profile feeds the cost model."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from autotune.search.evaluate import evaluate
from autotune.spec.resolve import resolve_cluster
from autotune.calibrate.fit import (FitError, FitLimits, Measurement, collective_features, fit_alpha_beta,
                                    fit_linear)
from autotune.calibrate.fit_report import format_fit_report
from autotune.calibrate.profile_io import HostInfo, ProfileData, build_profile, write_profile
from autotune.cost.comm import level_time_s
from autotune.errors import AutotuneError
from autotune.spec.hardware import LinkLevel
from autotune.spec.hardware_data import load_cluster, load_profile

RNG = np.random.default_rng(7)


def measured(group, amount, time_s, noise=0.0, repeats=7, label=""):
    samples = time_s * (1 + noise * RNG.standard_normal(repeats))
    return Measurement.from_samples(group=group, amount=amount, samples_s=np.abs(samples), label=label or f"{amount:g}")


def sweep(group, latency, per_unit, amounts, noise=0.02):
    return [measured(group, a, latency + a * per_unit, noise) for a in amounts]


FLOPS = np.geomspace(1e6, 1e11, 12)
BYTES = np.geomspace(1e4, 1e8, 10)


def test_fit_recovers_latency_and_slope_across_decades():
    fit = fit_linear("gemm/fp32", sweep("gemm/fp32", 8e-6, 1 / 90e9, FLOPS))
    assert fit.latency_s == pytest.approx(8e-6, rel=0.1)
    assert 1 / fit.seconds_per_unit == pytest.approx(90e9, rel=0.03)
    assert fit.r2 > 0.99 and fit.residual_rel_std < 0.05
    # the smallest kernels, latency-bound, are predicted as well as the largest
    assert abs(fit.points[0].rel_residual) < 0.08 and abs(fit.points[-1].rel_residual) < 0.08


def test_fit_residuals_are_reported_per_point():
    points = sweep("memory", 2e-6, 1 / 20e9, BYTES, noise=0.0)
    points[3] = measured("memory", BYTES[3], 3 * (2e-6 + BYTES[3] / 20e9))  # one kernel 3x slower
    fit = fit_linear("memory", points)
    report = fit.report()
    worst = min(report["points"], key=lambda p: p["rel_residual"])
    assert worst["amount"] == BYTES[3] and worst["rel_residual"] < -0.5
    assert report["num_points"] == len(BYTES) and 0 < report["residual_rel_std"] < 0.5


def test_negative_intercept_is_clamped_to_zero():
    fit = fit_linear("gemm/fp32", [measured("g", a, a / 50e9) for a in FLOPS])
    assert fit.latency_s >= 0 and 1 / fit.seconds_per_unit == pytest.approx(50e9, rel=0.02)


def test_too_few_points_is_refused_with_the_fit_named():
    with pytest.raises(FitError, match="fit.gemm/bf16.*at least 4"):
        fit_linear("gemm/bf16", sweep("gemm/bf16", 1e-5, 1e-11, FLOPS[:3]))


def test_noisy_points_are_dropped_then_refused():
    scatter = np.array([0.2, 0.5, 1.0, 1.5, 3.0, 4.0, 0.1])  # steps scatter by more than their median
    noisy = [Measurement.from_samples(group="memory", amount=a, samples_s=(1e-6 + a * 1e-10) * scatter)
             for a in BYTES]
    noisy[:2] = sweep("memory", 1e-6, 1e-10, BYTES[:2], noise=0.0)
    with pytest.raises(FitError, match="2 usable points.*8 too noisy"):
        fit_linear("memory", noisy)


def test_unrelated_times_are_refused():
    random_times = [measured("memory", a, t) for a, t in zip(BYTES, RNG.uniform(1e-4, 1e-2, len(BYTES)))]
    with pytest.raises(FitError, match="memory"):
        fit_linear("memory", random_times)


def test_limits_are_adjustable():
    points = sweep("memory", 1e-6, 1e-10, BYTES, noise=0.0)
    assert fit_linear("memory", points[:2], FitLimits(min_points=2)).num_points == 2


def test_measurement_rejects_nan_and_keeps_seed_statistics():
    with pytest.raises(AutotuneError, match="mean_s"):
        Measurement(group="g", amount=1.0, mean_s=math.nan, std_s=0.0, median_s=1.0, mad_s=0.0, num_repeats=1)
    m = Measurement.from_samples(group="g", amount=1.0, samples_s=[1.0, 1.0, 1.0, 10.0])
    assert m.mean_s == pytest.approx(3.25) and m.median_s == 1.0 and m.std_s > 4 and m.mad_s == 0.0


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_collective_features_price_as_the_cost_model(op, n):
    link = LinkLevel(name="l", latency_s=20e-6, alpha_s=5e-6, beta_s_per_byte=1e-9)
    steps, factor = collective_features(op, 2 if op == "send_recv" else n)
    nbytes = 64e6  # large: ring all-reduce beats tree
    expected = link.latency_s + steps * link.alpha_s + factor * nbytes * link.beta_s_per_byte
    assert level_time_s(op, nbytes, 2 if op == "send_recv" else n, link) == pytest.approx(expected)


def collective_points(base=30e-6, alpha=10e-6, beta=1 / 2e9, sizes=(2, 4), noise=0.02):
    points = []
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        for n in ((2,) if op == "send_recv" else sizes):
            steps, factor = collective_features(op, n)
            for nbytes in np.geomspace(4096, 16e6, 6):
                t = base + steps * alpha + factor * nbytes * beta
                points.append((op, n, measured(f"{op}/{n}", nbytes, t, noise, label=f"{op} {n} {nbytes:g}")))
    return points


def test_alpha_beta_fit_recovers_the_link():
    ab = fit_alpha_beta("link", collective_points())
    assert ab.bandwidth == pytest.approx(2e9, rel=0.05)
    assert ab.latency_s + ab.step_latency_s == pytest.approx(40e-6, rel=0.25)
    assert ab.r2 > 0.99


def host(**changes):
    fields = dict(kind="cpu", name="test cpu", memory_bytes=8 * 2**30, memory_source="test",
                  reserved_bytes=2**28, reserved_source="test", threads=1, logical_cpus=2,
                  torch_version="test", backend="gloo")
    return HostInfo(**{**fields, **changes})


def synthetic_kernels():
    return (sweep("gemm/fp32", 6e-6, 1 / 85e9, FLOPS) + sweep("attention/fp32", 4e-5, 1 / 40e9, FLOPS)
            + sweep("memory", 1e-6, 1 / 30e9, BYTES) + sweep("gemm/bf16", 1e-5, 1e-11, FLOPS[:2]))


def synthetic_profile(**changes):
    data = ProfileData(host=host(), kernels=synthetic_kernels(), collectives=collective_points(), quick=True,
                       pair_latency_s=[[0, 5e-5], [5e-5, 0]], pair_bandwidth=[[0, 3e9], [3e9, 0]])
    for key, value in changes.items():
        setattr(data, key, value)
    return build_profile(data)


def test_profile_has_the_device_file_keys_and_a_fit_report():
    profile = synthetic_profile()
    device = profile["device"]
    assert {"name", "kind", "peak_flops", "tiers", "regressions", "reserved_bytes", "kernel_efficiency",
            "provenance"} <= set(device)
    gemm = device["regressions"]["gemm"]["fp32"]
    assert {"latency_s", "seconds_per_flop", "r2", "residual_rel_std", "num_points", "source"} <= set(gemm)
    assert "seconds_per_byte" in device["regressions"]["memory"]
    assert "bf16" not in device["regressions"]["gemm"]  # too few points: refused, reported
    assert "at least 4" in profile["fits"]["gemm/bf16"]["refused"]
    link = profile["links"]["intra_node"]
    assert {"latency_s", "step_latency_s", "bandwidth", "collectives"} <= set(link)
    assert set(link["collectives"]["all_reduce"]) == {"2", "4"}
    assert profile["mesh"]["shape"] == [2]
    text = format_fit_report(profile, residuals=True)
    assert "gemm/fp32" in text and "R^2" in text and "refused gemm/bf16" in text and "residual" in text


def test_profile_without_a_memory_fit_is_refused():
    with pytest.raises(AutotuneError, match="memory"):
        synthetic_profile(kernels=sweep("gemm/fp32", 6e-6, 1 / 85e9, FLOPS))


def test_profile_round_trip_feeds_evaluate_with_its_band(tmp_path):
    path = tmp_path / "p.json"
    write_profile(path, synthetic_profile())
    profile = load_profile(path)
    cluster = resolve_cluster("cpu", profile)
    assert cluster.device.name == "test cpu"
    assert cluster.intra_node.collectives[("all_reduce", 2)].residual_rel_std > 0
    estimate = evaluate("small", 2, cluster="cpu", profile=str(path), dtype="fp32", global_batch=2, seq_len=128)
    gemm = cluster.device.regression("gemm", "fp32").residual_rel_std
    assert estimate.uncertainty_pct >= 100 * gemm * 0.5 and estimate.uncertainty_pct > 0


def test_workers_beyond_the_cores_share_them():
    cluster = load_cluster("cpu")
    assert cluster.cores_per_node == 2 and cluster.device.kind == "cpu"
    assert cluster.for_gpus(1) is cluster
    two = cluster.for_gpus(2)  # a core each: kernels keep their speed, no core is spare for gloo
    assert two.device is cluster.device and not two.comm_overlaps_compute and cluster.comm_overlaps_compute
    four = cluster.for_gpus(4)
    assert four.device.kernel_efficiency == pytest.approx(cluster.device.kernel_efficiency / 2)
    assert cluster.for_gpus(4) is four  # cached: the cost model's per-device caches stay warm


def test_cpu_cluster_slows_compute_with_four_workers():
    two = evaluate("small", 2, cluster="cpu", dtype="fp32", global_batch=4, seq_len=128, micro_batch=1)
    four = evaluate("small", 4, cluster="cpu", dtype="fp32", global_batch=4, seq_len=128, micro_batch=1)
    # same work per worker per micro-batch; four workers on two cores compute at half speed
    per_mb_two = two.breakdown["compute_s"] / 2
    per_mb_four = four.breakdown["compute_s"] / 1
    assert per_mb_four == pytest.approx(2 * per_mb_two, rel=1e-6)


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("mutate, needle", [
    (lambda p: p["device"]["regressions"]["memory"].pop("seconds_per_byte"), "seconds_per_byte"),
    (lambda p: p["device"]["regressions"]["gemm"]["fp32"].update(latency_s=-1.0), "latency_s"),
    (lambda p: p["device"]["regressions"]["gemm"]["fp32"].update(seconds_per_flop=float("nan")), "seconds_per_flop"),
    (lambda p: p["links"]["intra_node"].update(bandwidth=0), "bandwidth"),
    (lambda p: p.update(schema="other/1"), "schema"),
])
def test_bad_profile_is_one_line_exit_2(tmp_path, mutate, needle):
    profile = synthetic_profile()
    mutate(profile)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile))
    for args in (["profile", "--show", str(path)],
                 ["evaluate", "--model", "small", "--gpus", "2", "--cluster", "cpu", "--profile", str(path)]):
        code, out, err = run_cli(*args)
        assert code == 2, err
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_profile_show_prints_fits(tmp_path):
    path = tmp_path / "p.json"
    write_profile(path, synthetic_profile())
    code, out, err = run_cli("profile", "--show", str(path))
    assert code == 0, err
    assert "gemm/fp32" in out and "link intra_node" in out and "mesh discovered" in out


def test_band_weights_each_fit_by_its_share_of_the_time():
    """A badly fitted memory line widens the band by the memory-bound share of the time only."""
    from autotune.spec.hardware import Regression

    cluster = load_cluster("dgx-h100")
    device = cluster.device
    noisy_memory = Regression(latency_s=device.memory.latency_s, seconds_per_unit=device.memory.seconds_per_unit,
                              residual_rel_std=0.9)
    gemm = {k: Regression(latency_s=r.latency_s, seconds_per_unit=r.seconds_per_unit, residual_rel_std=0.02)
            for k, r in device.compute.items()}
    tuned = cluster.with_changes(device=device.with_changes(memory=noisy_memory, compute=gemm))
    band = evaluate("gpt3-13b", 8, cluster=tuned, tp=8, global_batch=8).uncertainty_pct
    assert 2.0 < band < 20.0  # GEMMs dominate a 13B layer's time; the memory-bound share is small


def test_refit_reproduces_a_profile_from_its_measurements(tmp_path, capsys):
    from autotune.cli.main import main

    path, again = tmp_path / "p.json", tmp_path / "again.json"
    original = synthetic_profile()
    write_profile(path, original)
    assert main(["profile", "--refit", str(path), "--out", str(again)]) == 0
    refit = json.loads(again.read_text())
    assert refit["device"]["regressions"] == original["device"]["regressions"]
    assert refit["links"] == original["links"] and refit["mesh"]["shape"] == original["mesh"]["shape"]
    assert "wrote" in capsys.readouterr().out


def test_checked_kernels_get_their_own_fit_and_price_their_operators(tmp_path):
    """A GELU measured 5x slower per byte than a copy (a CPU core computes its tanh) prices the
    FFN activation at that speed; norms and softmax, not measured here, stay on the copy fit."""
    from autotune.cost.compute import block_times
    from autotune.graph.table import model_tables
    from autotune.spec.presets import load_preset

    gelu = [measured("memory_check", a, 1e-6 + a * 5 / 30e9, 0.02, label=f"gelu {a:g}") for a in BYTES]
    profile = synthetic_profile(kernels=synthetic_kernels() + gelu)
    fits = profile["device"]["regressions"]["memory_kernels"]
    assert set(fits) == {"activation"} and "gelu" in fits["activation"]["source"]
    assert fits["activation"]["seconds_per_byte"] == pytest.approx(5 / 30e9, rel=0.1)
    path = tmp_path / "p.json"
    write_profile(path, profile)
    device = resolve_cluster("cpu", load_profile(path)).device
    plain = device.with_changes(memory_kernels={})
    table = model_tables(load_preset("small"), 128, 4, "flash").layer
    ops = {name: i for i, name in enumerate(table.names)}
    with_fit, without = (block_times(table, d, "fp32", 1, 1, 1, False).fwd_ops_s for d in (device, plain))
    assert with_fit[ops["ffn_act"]] == pytest.approx(5 * without[ops["ffn_act"]], rel=0.15)
    norm = table.kinds.index("norm")
    assert with_fit[norm] == without[norm]
