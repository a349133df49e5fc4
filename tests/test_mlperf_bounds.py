"""MLPerf Server's p99 bounds (autotune/data/mlperf_server_bounds.toml) and a VALID run's latencies read within them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autotune.calibrate.mlperf_bounds import server_bounds
from autotune.calibrate.serving_published import _predict
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import ServingDeployment, arrival_draws, expected_metric, run_serving
from autotune.cost.serving_load import Load, highest_rate_within, metric_value
from autotune.cost.serving_valid import LOWEST_SHARE, valid_rate_runs, within_bounds
from autotune.spec.hardware_data import load_cluster
from autotune.spec.json_file import read_csv_file
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

_DATA = Path(__file__).parent / "data"


def _row(name: str, row_id: str) -> dict:
    (row,) = [r for r in read_csv_file(_DATA / name, "csv")[1] if r["id"] == row_id]
    return row


def test_bounds_by_benchmark_and_scenario():
    server = server_bounds(_row("mlperf_v5_0_nvidia.csv", "mlp50-018"))  # llama2-70b Server
    assert (server.ttft_p99_s, server.tpot_p99_s) == (2.0, 0.2) and "mlperf.conf" in server.source
    # v5.0 named its interactive run as a benchmark (llama2-70b-interactive), v5.1 as a scenario
    v50 = _row("mlperf_v5_0_nvidia.csv", "mlp50-006")
    assert "interactive" in v50["model"] and "Server scenario" in v50["concurrency_or_batch"]
    assert (server_bounds(v50).ttft_p99_s, server_bounds(v50).tpot_p99_s) == (0.45, 0.04)
    v51 = _row("mlperf_v5_1_nvidia.csv", "mlp51-020")
    assert "Interactive scenario" in v51["concurrency_or_batch"] and server_bounds(v51).tpot_p99_s == 0.03
    assert server_bounds(_row("mlperf_v5_1_nvidia.csv", "mlp51-024")).tpot_p99_s == 0.08  # deepseek-r1 Server
    assert server_bounds(_row("mlperf_v5_0_nvidia.csv", "mlp50-016")) is None  # Offline: no bounds
    assert server_bounds(dict(v50, notes="INVALID run")) is None
    assert server_bounds(_row("serving_runs.csv", "sgl060-010")) is None  # not an MLPerf run


def _small() -> ServingDeployment:
    return ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                             runtime=load_runtime("vllm-0.6"), tp=1, weight_dtype="bf16")


def test_a_run_beyond_its_bounds_is_read_at_the_highest_rate_within_them():
    dep = _small()
    capacity = metric_value(run_serving(dep, Load(kind="max_throughput", num_requests=300, input_len=200,
                                                  output_len=100)).trace, "requests_per_s")
    over = Load(kind="rate", num_requests=300, input_len=200, output_len=100, rate_per_s=1.2 * capacity)
    runs = arrival_draws(dep, over)
    bounds = dict(ttft_p99_s=0.1, tpot_p99_s=0.2)
    assert not within_bounds(runs, **bounds)  # past capacity the queue's p99 wait passes 0.1 s (0.37 s)
    valid, rate = valid_rate_runs(dep, over, runs, **bounds)
    assert LOWEST_SHARE * over.rate_per_s <= rate < over.rate_per_s and within_bounds(valid, **bounds)
    assert expected_metric(valid, "ttft_mean") < expected_metric(runs, "ttft_mean") / 2
    # 3% of the row's rate above the rate found, the bounds fail here (bisection's stated tolerance; serving_valid.py)
    above = arrival_draws(dep, Load(kind="rate", num_requests=300, input_len=200, output_len=100,
                                    rate_per_s=rate + 0.03 * over.rate_per_s))
    assert not within_bounds(above, **bounds)
    light = Load(kind="rate", num_requests=300, input_len=200, output_len=100, rate_per_s=0.3 * capacity)
    light_runs = arrival_draws(dep, light)
    assert valid_rate_runs(dep, light, light_runs, **bounds) == (light_runs, None)  # within them: the row's own rate


def test_a_published_server_latency_is_read_within_its_bounds():
    """Llama 2 70B on 8 H200s (v5.0) at 2x its published target QPS, past the priced capacity: its TTFT row is read
    at the highest rate within 2 s / 200 ms, and a note says so (the run shortened to 1,200 requests a replica)."""
    row = _row("mlperf_v5_0_nvidia.csv", "mlp50-018")
    assert row["concurrency_or_batch"].endswith("target_qps=114.24")
    faster = dict(row, concurrency_or_batch=row["concurrency_or_batch"].replace("114.24", "228.48"))
    case = case_from_row(faster)
    case = replace(case, load=replace(case.load, num_requests=1200))
    predicted, notes, load = _predict(case, {}, server_bounds(faster))
    (valid,) = [n for n in notes if n.startswith("VALID")]
    assert "llama2-70b server" in valid and load > 1.0
    assert predicted * 1e-9 < 2.0  # mean TTFT below the p99 bound, not the saturated queue's
    unbounded, _, _ = _predict(case, {}, None)
    assert unbounded > predicted * 1.5


def test_the_bisection_step_is_fixed_at_its_start():
    """Between a quarter of a rate and the rate, to 3% of the rate: the rate found is within 0.03 below the highest
    that holds (a step measured against the bracket's rising low end stopped at 0.766 for a threshold of 0.8)."""
    found = highest_rate_within(lambda rate: rate <= 0.8, low_per_s=0.25, high_per_s=1.0, tolerance=0.03 / 0.25)
    assert 0.77 <= found <= 0.8
    assert highest_rate_within(lambda rate: False, low_per_s=0.25, high_per_s=1.0) == 0.0
