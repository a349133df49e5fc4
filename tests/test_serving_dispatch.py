"""autotune/cost/serving_dispatch.py: one instance's share of a join-the-shortest-queue dispatch, and where it applies."""

from __future__ import annotations

import numpy as np

from autotune.cost import serving_dispatch
from autotune.cost.serving_run import Requests


def _script():
    return serving_dispatch


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


def _runs(dispatch: str, replicas: int, pp: int = 1, kind: str = "rate"):
    from types import SimpleNamespace

    from autotune.cost.serving_load import Load

    serving = SimpleNamespace(server_dispatch=dispatch)
    dep = SimpleNamespace(runtime=SimpleNamespace(serving=serving), replicas=replicas, pp=pp)
    load = Load(kind=kind, num_requests=200, input_len=100, output_len=50, rate_per_s=5.0 if kind == "rate" else 0.0)
    return tuple(SimpleNamespace(deployment=dep, load=load, trace=None) for _ in range(2))


def test_dispatched_runs_rerun_each_draw_on_instance_zeros_share(monkeypatch):
    from autotune.cost.serving_load import requests_for

    monkeypatch.setattr(serving_dispatch, "_mean", lambda runs, metric: {"ttft_mean": 0.2, "tpot_mean": 0.05}[metric])
    sent_to = []
    got = serving_dispatch.dispatched_runs(_runs("least_in_flight", 4), lambda dep, load, sent: sent_to.append(sent) or "rerun",
                                           requests_for)
    assert got == ("rerun", "rerun")
    assert all(abs(len(s.arrival_s) - 200) < 20 and s.arrival_s[0] == 0.0 for s in sent_to)
    # the system's stream at 4 x the rate, a quarter of it each: the share's rate is the replica's
    assert all(abs(len(s.arrival_s) / s.arrival_s[-1] - 5.0) < 0.5 for s in sent_to)


def test_dispatched_runs_leave_independent_single_pipelined_and_closed_loads():
    def fail(*args):
        raise AssertionError("re-ran a draw the dispatch does not apply to")

    for runs in (_runs("independent", 4), _runs("least_in_flight", 1), _runs("least_in_flight", 4, pp=2),
                 _runs("least_in_flight", 4, kind="max_throughput")):
        assert serving_dispatch.dispatched_runs(runs, fail, fail) is runs
