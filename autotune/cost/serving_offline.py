"""A long maximum-throughput run (MLPerf Offline: every request queued at once) priced from its head.

With every request queued at t = 0 the engine admits them first come first served, so a run of N requests
is the run of its first n until that run's queue empties: the two share their admissions up to the n-th.
Once the first batch has turned over, the batch admits requests at a steady rate, and the long run admits
its other N - n at that rate before the same drain (the last admitted requests decoding in a shrinking
batch). So the n-request head is extended: the requests it admitted in its second half repeated for the
N - n more, its own second half and drain moved after them. That holds only where that half is steady: it
must start several drains in (STEADY_DRAINS; a request admitted at t = 0 with the longest output runs for
about one drain, and the admission rate swings for a few more after the synchronised start). A head that
starts its second half too early is lengthened; where the head would hold half the run or more
(DeepSeek-R1's 20,000-token outputs: a drain of 800-1,000 s, as long as a 10,000-request run's admissions),
the whole run is simulated.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.cost.serving_eval import ServingDeployment, ServingRun, arrival_draws
from autotune.cost.serving_load import Load
from autotune.cost.serving_run import Trace

__all__ = ["offline_draws", "extended_trace", "steady_drains", "STEADY_DRAINS"]

# A head whose second half starts this many drains in is extended: from such heads the extension came within
# 0.6% of whole runs (Llama 2 70B on B200 and GB200, 9.9 and 12.4 drains: -0.29% and +0.54%; Llama 3.1 8B, 14.3:
# +0.01%), from heads at 2.4-2.6 drains 1-3% off (the admission rate still swings after the first batch's
# synchronised start); with it, 14 Offline rows of the four MLPerf files price within 0.4% of their whole runs
# (scripts/offline_extension_check.py; docs/serving.md, mlpfull46)
STEADY_DRAINS = 10.0


def offline_draws(dep: ServingDeployment, load: Load, head: int) -> tuple[ServingRun, ...]:
    """serving_eval.arrival_draws, but a maximum-throughput load of more than ``head`` requests simulated for a
    head of at least ``head`` requests that reaches its steady state and extended (extended_trace); in full where
    such a head would hold half the run or more."""
    while load.kind == "max_throughput" and 2 * head < load.num_requests:
        (run,) = arrival_draws(dep, replace(load, num_requests=head))
        drains = steady_drains(run.trace)
        if drains >= STEADY_DRAINS:
            return (replace(run, load=load, trace=extended_trace(run.trace, load.num_requests)),)
        # admissions run about linearly in time past the first batch: the head whose second half starts late enough,
        # 10% over that guess (a head still short is lengthened again)
        head = load.num_requests if drains <= 0 else int(head * 1.1 * STEADY_DRAINS / drains) + 1
    return arrival_draws(dep, load)


def steady_drains(trace: Trace) -> float:
    """How many of its drains (the time from the last admission to the last finish) pass before ``trace``
    admits the first request of its second half: the requests admitted before then have turned over."""
    first = np.sort(trace.first_token_s)
    drain_s = float(trace.finish_s.max() - first[-1])
    return float(first[len(first) // 2]) / drain_s if drain_s > 0 else float("inf")


def extended_trace(trace: Trace, requests: int) -> Trace | None:
    """``trace`` (every request arriving at 0) extended to ``requests`` requests: the requests it admitted in its
    second half repeated at the rate it admitted them, its own second half and drain moved after the copies;
    None where that half starts before one drain's length (not yet steady)."""
    first, n = trace.first_token_s, len(trace.first_token_s)
    order = np.argsort(first, kind="stable")
    segment = order[n // 2:]
    start_s, last_s = float(first[segment[0]]), float(first[segment[-1]])
    drain_s = float(trace.finish_s.max()) - last_s
    if requests <= n or len(segment) < 2 or last_s <= start_s or start_s < drain_s:
        return None
    m = len(segment)
    period_s = (last_s - start_s) * m / (m - 1)  # seconds to admit m requests at the segment's steady rate
    extra = np.arange(requests - n)
    copied, shift_s = segment[extra % m], (extra // m) * period_s
    moved = np.zeros(n)
    moved[segment] = (requests - n) * period_s / m
    return Trace(arrival_s=np.concatenate([trace.arrival_s, trace.arrival_s[copied]]),
                 first_token_s=np.concatenate([first + moved, first[copied] + shift_s]),
                 finish_s=np.concatenate([trace.finish_s + moved, trace.finish_s[copied] + shift_s]),
                 output_len=np.concatenate([trace.output_len, trace.output_len[copied]]),
                 input_len=np.concatenate([trace.input_len, trace.input_len[copied]]),
                 itl_s=trace.itl_s, itl_weight=trace.itl_weight, steps=trace.steps, mean_running=trace.mean_running,
                 prefilled_tokens=trace.prefilled_tokens)
