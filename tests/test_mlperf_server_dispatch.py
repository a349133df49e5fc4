"""scripts/mlperf_server_dispatch.py: one instance's share of a join-the-shortest-queue dispatch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from autotune.cost.serving_run import Requests

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("mlperf_server_dispatch", ROOT / "scripts" / "mlperf_server_dispatch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _poisson(n: int, rate_per_s: float, seed: int = 0) -> Requests:
    arrival = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate_per_s, n))
    ones = np.ones(n, dtype=np.int64)
    return Requests(arrival_s=arrival, input_len=ones, output_len=ones)


def test_ties_go_to_the_lowest_index_and_each_instance_takes_its_turn():
    script = _script()
    sent = _poisson(8, 100.0)
    in_flight = np.full(8, 1e3)  # nothing finishes: the counts rise in turn
    for k in range(4):
        assert script.jsq_share(sent, 4, in_flight, instance=k).tolist() == [k, k + 4]


def test_one_instance_takes_every_request():
    script = _script()
    sent = _poisson(50, 10.0)
    assert script.jsq_share(sent, 1, np.full(50, 0.5)).tolist() == list(range(50))


def test_an_instances_arrivals_are_regular_over_its_requests_time_in_flight():
    """8 instances, 80 requests/s, each 2 s in flight: instance 0 gets an eighth of them, and over windows of the
    time in flight (2 s) or longer its count varies far less than a Poisson share's (variance = mean); over shorter
    windows hardly less (the dispatch answers completions, not queues)."""
    script = _script()
    sent = _poisson(8 * 4000, 80.0)
    mine = sent.arrival_s[script.jsq_share(sent, 8, np.full(len(sent.arrival_s), 2.0))]
    assert abs(len(mine) / (8 * 4000) - 1 / 8) < 0.005
    for window_s in (2.0, 8.0):
        counts = np.histogram(mine, bins=np.arange(10.0, 390.0, window_s))[0]
        assert abs(counts.mean() - 10.0 * window_s) < 0.05 * 10.0 * window_s
        assert counts.var() < 0.25 * counts.mean()
    short = np.histogram(mine, bins=np.arange(10.0, 390.0, 0.5))[0]
    assert short.var() > 0.5 * short.mean()
