"""A VALID MLPerf Server run's latencies where the priced system misses the bounds at the run's rate.

LoadGen publishes a Server (or Interactive) result only if the run's p99 TTFT and p99 TPOT stayed within
the benchmark's bounds (calibrate/mlperf_bounds.py); submitters raise target_qps until one binds, so the
measured system ran at or inside them. Where the priced system, simulated at the row's rate, is beyond them
(its capacity priced below the real one's: near the bound a 1% capacity error moves latency by rho /
(1 - rho) %, serving_capacity.py), reading its latencies there prices a run LoadGen would have rejected. The
latencies of the run it would have published are those at the highest rate within the bounds; the
throughput rows keep the row's rate (LoadGen's completed tokens/s of the stated run).
"""

from __future__ import annotations

from dataclasses import replace

from autotune.cost.serving_eval import ServingDeployment, ServingRun, arrival_draws, expected_metric
from autotune.cost.serving_load import Load, highest_rate_within

__all__ = ["within_bounds", "valid_rate_runs"]

LOWEST_SHARE = 0.25  # the search looks down to a quarter of the row's rate: further below, the row's own system is not this one


def within_bounds(runs: tuple[ServingRun, ...], *, ttft_p99_s: float, tpot_p99_s: float) -> bool:
    """Whether the draws' p99 TTFT and p99 TPOT (each averaged over the draws) stay within the bounds."""
    return (expected_metric(runs, "ttft_p99") <= ttft_p99_s and expected_metric(runs, "tpot_p99") <= tpot_p99_s)


def valid_rate_runs(dep: ServingDeployment, load: Load, runs: tuple[ServingRun, ...], *, ttft_p99_s: float,
                    tpot_p99_s: float, tolerance: float = 0.03) -> tuple[tuple[ServingRun, ...], float | None]:
    """``runs`` (the draws of ``load``) where they meet the bounds or ``load`` is not a rate load, with None; else the
    draws at the highest rate within them, to ``tolerance`` of the row's rate below it (bisection), and that rate;
    where even LOWEST_SHARE of the rate misses them, the draws there and that rate."""
    if load.kind != "rate" or within_bounds(runs, ttft_p99_s=ttft_p99_s, tpot_p99_s=tpot_p99_s):
        return runs, None
    simulated = {load.rate_per_s: runs}

    def meets(rate: float) -> bool:
        if rate not in simulated:
            simulated[rate] = arrival_draws(dep, replace(load, rate_per_s=rate))
        return within_bounds(simulated[rate], ttft_p99_s=ttft_p99_s, tpot_p99_s=tpot_p99_s)

    low = LOWEST_SHARE * load.rate_per_s
    # the bisection's step is tolerance x its low end, here a quarter of the row's rate: tolerance x the rate
    rate = highest_rate_within(meets, low_per_s=low, high_per_s=load.rate_per_s, tolerance=tolerance / LOWEST_SHARE) or low
    return simulated[rate], rate
