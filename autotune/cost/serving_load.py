"""Load as serving benchmarks apply it, and their metrics as they read them.

* maximum throughput: every request queued at once (trtllm-bench throughput; `bench_serving
  --request-rate inf`; MLPerf Offline), so the engine runs at its own batch limits;
* fixed concurrency: a closed loop keeping C requests in flight (`--max-concurrency`);
* fixed request rate: Poisson arrivals at rate r (`--request-rate r`; MLPerf Server at its target
  QPS), queueing included: past the engine's capacity the queue grows for as long as the run lasts;
* MLPerf Server's constraint: the highest rate whose p99 TTFT and p99 TPOT stay within the limits
  (Llama 2 70B: 2 s and 200 ms; MLPerf Inference rules, v4.1).

Metrics (:func:`metric_value`) follow the benchmarks: TTFT = first token - arrival; TPOT = (latency
- TTFT) / (output tokens - 1) per request; ITL = gaps between streamed chunks; throughput = tokens
over the run's duration (first arrival to last finish; MLPerf Server's, to the final issued query's
finish); each per replica, per GPU or for the whole
system (replicas x the replica's), mean, median or p99.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.cost.serving_lengths import RequestLengths
from autotune.cost.serving_run import Requests, Trace
from autotune.errors import AutotuneError, require

__all__ = ["Load", "LOAD_KINDS", "requests_for", "metric_value", "METRICS", "SCOPES", "mlperf_server_max_rate", "highest_rate_within",
           "weighted_percentile"]

LOAD_KINDS = ("max_throughput", "concurrency", "rate")
# metric name -> (statistic, quantity); quantities in seconds or tokens/s
METRICS = {
    "output_tokens_per_s": ("total", "output"), "total_tokens_per_s": ("total", "total"),
    "requests_per_s": ("total", "requests"),
    # MLPerf LoadGen Server's "Completed tokens per second": every output token over the time from the
    # start to the completion of the final issued query, not of the last to finish (mlcommons/inference
    # @05a9cec3596d loadgen/results.cc: token_count / pr.final_query_all_samples_done_time; loadgen.cc
    # IssueQueries: final_query.all_samples_done_time - start). A long request issued earlier that
    # finishes later adds its tokens but not its tail.
    "loadgen_completed_tokens_per_s": ("total", "output_to_final_query"),
    "ttft_mean": ("mean", "ttft"), "ttft_median": ("median", "ttft"), "ttft_p99": ("p99", "ttft"),
    "tpot_mean": ("mean", "tpot"), "tpot_median": ("median", "tpot"), "tpot_p99": ("p99", "tpot"),
    "itl_mean": ("mean", "itl"), "itl_median": ("median", "itl"), "itl_p99": ("p99", "itl"),
    "e2e_mean": ("mean", "e2e"), "e2e_median": ("median", "e2e"),
    # trtllm-bench's 'Per User Output Throughput' ('[w/ ctx]' in later releases): each request's output tokens over
    # its end-to-end latency, the first token's wait included, averaged over requests (NVIDIA/TensorRT-LLM
    # tensorrt_llm/bench/dataclasses/reporting.py: output_throughput_per_user of entry.output_token_throughput)
    "output_per_e2e_mean": ("mean", "output_per_e2e"),
}
# whose throughput: one replica (a TP group), one GPU, all replicas of the system
SCOPES = ("replica", "gpu", "system")


@dataclass(frozen=True, kw_only=True)
class Load:
    """How requests reach one replica: ``kind`` in LOAD_KINDS, ``num_requests`` of mean
    ``input_len`` / ``output_len`` tokens, ``concurrency`` or ``rate_per_s``. Every request has those
    lengths, unless ``lengths`` gives the dataset's distribution: then each request's are drawn from it
    (seeded by ``seed``) and the two means size the engine's limits."""

    kind: str
    num_requests: int
    input_len: int
    output_len: int
    concurrency: int = 0
    rate_per_s: float = 0.0
    seed: int = 0  # Poisson arrivals are drawn from numpy's default_rng(seed), lengths from default_rng((seed, 1))
    lengths: RequestLengths | None = None

    def __post_init__(self) -> None:
        require(self.kind in LOAD_KINDS, "load", f"{self.kind!r}; choose one of: {', '.join(LOAD_KINDS)}")
        for name in ("num_requests", "input_len", "output_len"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value!r}")
        if self.kind == "concurrency":
            require(isinstance(self.concurrency, int) and self.concurrency >= 1, "concurrency",
                    f"must be an integer >= 1 for a fixed-concurrency load, got {self.concurrency!r}")
        if self.kind == "rate":
            require(isinstance(self.rate_per_s, (int, float)) and 0 < self.rate_per_s < float("inf"), "rate_per_s",
                    f"must be a finite rate > 0 for a fixed-rate load, got {self.rate_per_s!r}")
        require(self.lengths is None or isinstance(self.lengths, RequestLengths), "lengths",
                f"must be a RequestLengths (autotune/cost/serving_lengths.py) or None, got {self.lengths!r}")

    @property
    def shortest_input_len(self) -> int:
        """The shortest prompt a request can have (the most prompts a token budget holds)."""
        return min(self.input_len, self.lengths.shortest_input_tokens) if self.lengths else self.input_len


def requests_for(load: Load) -> Requests:
    """The run's requests: arrival times by the load's kind, the load's lengths (each request's own,
    drawn, where it has a distribution; a separate seed keeps the arrivals those of fixed lengths)."""
    n = load.num_requests
    if load.kind == "rate":
        gaps = np.random.default_rng(load.seed).exponential(1.0 / load.rate_per_s, n)
        arrival = np.cumsum(gaps) - gaps[0]  # the first request at 0, as a benchmark's clock starts
    else:
        arrival = np.zeros(n)
    if load.lengths is not None:
        input_len, output_len = load.lengths.draw(n, load.seed)
    else:
        input_len, output_len = np.full(n, load.input_len, dtype=np.int64), np.full(n, load.output_len, dtype=np.int64)
    return Requests(arrival_s=arrival, input_len=input_len, output_len=output_len,
                    concurrency=min(load.concurrency, n) if load.kind == "concurrency" else 0)


def _samples(trace: Trace, quantity: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights) of a latency quantity: one per request, or per streamed gap for ITL."""
    if quantity == "itl":
        return trace.itl_s, trace.itl_weight
    e2e = trace.finish_s - trace.arrival_s
    values = {"ttft": trace.ttft_s, "tpot": trace.tpot_s, "e2e": e2e, "output_per_e2e": trace.output_len / e2e}[quantity]
    return values, np.ones(len(values))


def _throughput(trace: Trace, quantity: str) -> float:
    if quantity == "output_to_final_query":
        final = int(np.argmax(trace.arrival_s))  # the last query issued
        return float(trace.output_len.sum()) / float(trace.finish_s[final] - trace.arrival_s.min())
    tokens = {"output": trace.output_len.sum(), "total": trace.output_len.sum() + trace.input_len.sum(),
              "requests": len(trace.output_len)}[quantity]
    return float(tokens) / trace.duration_s


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of ``values`` repeated ``weights`` times (numpy's default rule: linear
    between the order statistics at positions q/100 x (count - 1))."""
    order = np.argsort(values, kind="stable")
    values, counts = values[order], np.cumsum(weights[order])
    position = q / 100.0 * (counts[-1] - 1)
    index = np.floor(position)
    below = values[min(int(np.searchsorted(counts, index, side="right")), len(values) - 1)]
    above = values[min(int(np.searchsorted(counts, index + 1, side="right")), len(values) - 1)]
    return float(below + (above - below) * (position - np.floor(position)))


def metric_value(trace: Trace, metric: str, *, scope: str = "replica", replicas: int = 1, gpus_per_replica: int = 1) -> float:
    """``metric`` (METRICS) of a replica's run; throughputs scaled to ``scope``."""
    if metric not in METRICS:
        raise AutotuneError("metric", f"{metric!r} is not a serving metric; valid: {', '.join(METRICS)}")
    require(scope in SCOPES, "scope", f"{scope!r}; choose one of: {', '.join(SCOPES)}")
    statistic, quantity = METRICS[metric]
    if statistic == "total":
        per = {"replica": 1.0, "gpu": 1.0 / gpus_per_replica, "system": float(replicas)}[scope]
        return _throughput(trace, quantity) * per
    values, weights = _samples(trace, quantity)
    require(len(values) > 0, "metric", f"{metric}: the run has no {quantity} samples (one-token outputs?)")
    if statistic == "mean":
        return float(np.average(values, weights=weights))
    return weighted_percentile(values, weights, 50.0 if statistic == "median" else 99.0)


def mlperf_server_max_rate(run, *, ttft_p99_s: float, tpot_p99_s: float, low_per_s: float, high_per_s: float,
                           tolerance: float = 0.02) -> float:
    """The highest request rate in [low, high] whose p99 TTFT and TPOT meet the limits (bisection;
    ``run(rate) -> Trace`` simulates one rate). 0.0 if even ``low`` misses them."""
    def meets(rate: float) -> bool:
        trace = run(rate)
        return (metric_value(trace, "ttft_p99") <= ttft_p99_s and metric_value(trace, "tpot_p99") <= tpot_p99_s)

    return highest_rate_within(meets, low_per_s=low_per_s, high_per_s=high_per_s, tolerance=tolerance)


def highest_rate_within(meets, *, low_per_s: float, high_per_s: float, tolerance: float = 0.02) -> float:
    """The highest rate in [low, high] for which ``meets(rate)`` holds, to ``tolerance`` of the given ``low`` (bisection:
    ``meets`` assumed to hold below some rate and not above it). 0.0 if it fails at ``low``."""
    if not meets(low_per_s):
        return 0.0
    if meets(high_per_s):
        return high_per_s
    step_per_s = tolerance * low_per_s  # fixed at the start: the bracket's low end moves up as it narrows
    while high_per_s - low_per_s > step_per_s:
        middle = (low_per_s + high_per_s) / 2.0
        low_per_s, high_per_s = (middle, high_per_s) if meets(middle) else (low_per_s, middle)
    return low_per_s
