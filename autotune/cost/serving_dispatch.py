"""How a harness spreads a fixed-rate load over a system's instances: independently, or to the least busy.

autotune simulates one replica. Under ``server_dispatch = "independent"`` (the default) it receives a Poisson
stream at 1 / replicas of the system's rate, as independent clients or a random balancer would send it.
NVIDIA's MLPerf Server harnesses send each query to the instance with the fewest queries in flight (enqueued
and not completed; serving_systems.toml's mlperf-nvidia presets cite the source): join-the-shortest-queue.
That keeps every instance's in-flight count within one of the others', so an instance's arrivals follow the
system's rate over any window as long as a request stays in flight, where an independent Poisson share drifts
(its count a window varies as much as its mean); near capacity that drift is what builds a long queue.

The dispatch answers completions, which the one simulated replica cannot see for the others. It is priced in
two passes: the independent draws first, whose mean TTFT and TPOT give every request a time in flight
(TTFT + (output - 1) x TPOT); then the system's Poisson stream (replicas x the replica's requests at replicas x
its rate, drawn with the same seed) is dispatched by those times, and instance 0's share is simulated, one run
a draw. An approximation: an instance's own slower or faster completions do not feed back into its share.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Callable

import numpy as np

from autotune.cost.serving_load import Load, metric_value
from autotune.cost.serving_run import Requests

__all__ = ["DISPATCHES", "jsq_share", "jsq_requests", "dispatched_runs"]

DISPATCHES = ("independent", "least_in_flight")


def jsq_share(sent: Requests, instances: int, in_flight_s: np.ndarray, instance: int = 0) -> np.ndarray:
    """Indices of the system's requests (``sent``, in arrival order) that join-the-shortest-queue on in-flight
    counts sends to ``instance``, request j in flight from its arrival for ``in_flight_s[j]``; ties go to the
    lowest index (std::min_element, Python's min)."""
    count = np.zeros(instances, dtype=np.int64)
    done: list[tuple[float, int]] = []
    mine = []
    for j, t in enumerate(sent.arrival_s):
        while done and done[0][0] <= t:
            count[heapq.heappop(done)[1]] -= 1
        k = int(np.argmin(count))
        count[k] += 1
        heapq.heappush(done, (float(t + in_flight_s[j]), k))
        if k == instance:
            mine.append(j)
    return np.asarray(mine, dtype=np.int64)


def jsq_requests(draw: Callable[[Load], Requests], load: Load, instances: int, ttft_s: float,
                 tpot_s: float) -> Requests:
    """Instance 0's requests when the system's stream (``draw`` of ``instances`` x the replica's load) is
    dispatched to the least busy instance, each request in flight for ttft_s + (output - 1) x tpot_s."""
    system = draw(replace(load, num_requests=load.num_requests * instances, rate_per_s=load.rate_per_s * instances))
    idx = jsq_share(system, instances, ttft_s + (system.output_len - 1) * tpot_s)
    arrival = system.arrival_s[idx]
    return Requests(arrival_s=arrival - arrival[0], input_len=system.input_len[idx], output_len=system.output_len[idx])


def _mean(runs: tuple, metric: str) -> float:
    return sum(metric_value(r.trace, metric) for r in runs) / len(runs)


def dispatched_runs(runs: tuple, run: Callable, draw: Callable[[Load], Requests]) -> tuple:
    """The draws ``runs`` of a rate load (serving_eval.arrival_draws) re-run with instance 0's share of a
    least-in-flight dispatch where the deployment's engine dispatches so (``run(dep, load, sent)`` simulates one
    replica on the requests ``sent``); ``runs`` unchanged for one instance, pipeline streams (pp > 1) or a load
    that is not a rate."""
    dep, load = runs[0].deployment, runs[0].load
    if (dep.runtime.serving.server_dispatch != "least_in_flight" or dep.replicas < 2 or dep.pp > 1
            or load.kind != "rate"):
        return runs
    ttft_s, tpot_s = _mean(runs, "ttft_mean"), _mean(runs, "tpot_mean")
    return tuple(run(r.deployment, r.load, jsq_requests(draw, r.load, dep.replicas, ttft_s, tpot_s)) for r in runs)
