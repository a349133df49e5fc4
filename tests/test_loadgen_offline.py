"""MLPerf Offline rows priced at LoadGen's own sample count (calibrate/loadgen_offline.py), the long runs
from their head extended at its steady admission rate (cost/serving_offline.py)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.loadgen_offline import offline_requests
from autotune.calibrate.serving_rows import _datasets, case_from_row
from autotune.calibrate.serving_systems import _systems
from autotune.cost.serving_load import metric_value
from autotune.cost.serving_offline import extended_trace
from autotune.cost.serving_run import Trace

_DATA = Path(__file__).parent / "data"
# each benchmark's mlperf.conf Offline min_query_count: the dataset entry whose offline_samples holds it
_DATASET = {"llama2-70b": "openorca-mlperf", "mixtral-8x7b": "mixtral-mlperf", "llama3-405b": "llama3-405b-mlperf",
            "deepseek-v3": "deepseek-r1-mlperf", "llama3-8b": "llama3-8b-mlperf"}


def test_every_published_runs_sample_count_is_loadgens_rule_on_its_systems_settings():
    """A system whose expected QPS is read from its run's log: LoadGen's count from the system's min_duration,
    min_query_count and QPS is the samples_per_query that log states."""
    logged = [s for s in _systems() if "samples_per_query : " in (dict(s.sources).get("offline_expected_qps") or "")]
    assert len(logged) == 24
    for system in logged:
        stated = int(re.search(r"samples_per_query : (\d+)", dict(system.sources)["offline_expected_qps"]).group(1))
        run_s = system.get("rate_run_s") or 2400  # the v4.1 entries take mlperf-nvidia-4.1's 2,400 s
        n, _ = offline_requests(system, run_s, _datasets()[_DATASET[system.model]], 1)
        assert n == stated, (system.config, n, stated)


def _row(path: str, row_id: str) -> dict:
    with (_DATA / path).open(newline="") as f:
        return next(r for r in csv.DictReader(f) if r["id"] == row_id)


@pytest.mark.parametrize(("path", "row_id", "requests"), [
    ("mlperf_v5_1_nvidia.csv", "mlp51-022", 26328),  # DeepSeek-R1 on B200 x8: the config's min_query_count
    ("mlperf_v5_1_nvidia.csv", "mlp51-001", 992640 // 8),  # Llama 2 70B, 8 instances: 1.1 x 2,400 s x 376/s
    ("mlperf_v5_0_nvidia.csv", "mlp50-023", 8313 // 2),  # Llama 3.1 405B on H200, PP 2: mlperf.conf's 8,313
    ("mlperf_v5_0_nvidia.csv", "mlp50-035", 290400 // 8),  # Llama 2 70B on H100, 4 instances of PP 2
])
def test_an_offline_row_issues_loadgens_count_a_replica(path, row_id, requests):
    case = case_from_row(_row(path, row_id))
    assert case.load.kind == "max_throughput" and case.load.num_requests == requests
    assert any("LoadGen's Offline query" in a for a in case.assumed)


def _steady(n: int, rate_per_s: float, life_s: float) -> Trace:
    """n requests all arriving at 0, admitted at a constant rate, each decoding 100 tokens for life_s."""
    first = np.arange(n) / rate_per_s
    return Trace(arrival_s=np.zeros(n), first_token_s=first, finish_s=first + life_s, output_len=np.full(n, 100),
                 input_len=np.full(n, 10), itl_s=np.array([0.01]), itl_weight=np.array([1.0]), steps=1, mean_running=1.0)


def test_a_steady_run_extends_at_its_admission_rate_then_drains():
    trace = extended_trace(_steady(1000, 10.0, 5.0), 4000)
    assert len(trace.output_len) == 4000
    assert trace.duration_s == pytest.approx(3999 / 10.0 + 5.0, rel=1e-3)  # the 4,000th admitted, then one lifetime
    assert metric_value(trace, "output_tokens_per_s") == pytest.approx(4000 * 100 / (3999 / 10.0 + 5.0), rel=1e-3)


def test_a_run_still_turning_over_its_first_batch_is_not_extended():
    # its second half starts at 50 s, before one 80 s lifetime: the first requests still decode
    assert extended_trace(_steady(1000, 10.0, 80.0), 4000) is None
    assert extended_trace(_steady(1000, 10.0, 5.0), 1000) is None  # nothing to add
