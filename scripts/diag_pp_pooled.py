"""A diagnosis: a pipeline-parallel TensorRT-LLM instance priced as pp independent micro-batch streams (the pricing
before cost/serving_pp_rounds.py) beside the pipeline rounds check-published now prices, at a row's rate (or the
rates given), one draw each, no dispatch over instances.

Streams: each micro-batch its own Poisson share of the requests, its own queue, one prompt chunk a step, each step
crossing every layer at that micro-batch's own pace. Rounds (serving_pp_rounds.instance_trace): the instance's
requests on one queue, a prompt one chunk (at most a micro-batch's budget) a round, a round lasting the fuller
micro-batch's step (NVIDIA/TensorRT-LLM trtGptModelInflightBatching.cpp @b35ac1b64368 forwardAsync: every scheduled
request joins the in-flight set until its micro-batch's forwardSync).

usage: PYTHONPATH=. python scripts/diag_pp_pooled.py CSV ROW_ID [RATE_SCALE ...]
e.g.   PYTHONPATH=. python scripts/diag_pp_pooled.py tests/data/mlperf_v5_0_nvidia.csv mlp50-010 1.0 0.67"""

from __future__ import annotations

import csv
import sys
from dataclasses import replace

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving
from autotune.cost.serving_load import metric_value


def _streams(dep):
    """The deployment with its engine's micro-batches priced as independent streams (no rounds)."""
    serving = replace(dep.runtime.serving, pp_seqs_per_micro_batch=False)
    return replace(dep, runtime=replace(dep.runtime, serving=serving))


def _line(trace) -> str:
    p99 = float(np.nanpercentile(trace.first_token_s - trace.arrival_s, 99))
    return (f"TTFT {metric_value(trace, 'ttft_mean'):.3f} s (p99 {p99:.2f}), "
            f"TPOT {metric_value(trace, 'tpot_mean') * 1e3:.1f} ms")


def main(argv: list[str]) -> None:
    rows = {r["id"]: r for r in csv.DictReader(open(argv[0], encoding="utf-8"))}
    case = case_from_row(rows[argv[1]])
    dep, base = case.deployment, case.load
    print(f"{argv[1]} tp {dep.tp} pp {dep.pp} x {dep.replicas}; a stream's rate {base.rate_per_s:.4f}/s; measured "
          f"{rows[argv[1]]['metric']} {rows[argv[1]]['value']} (streams: the engine's seqs bound split over pp)")
    for scale in [float(a) for a in argv[2:]] or [1.0]:
        load = replace(base, rate_per_s=base.rate_per_s * scale)
        rounds, streams = run_serving(dep, load), run_serving(_streams(dep), load)
        print(f"  rate x{scale:.2f}: streams {_line(streams.trace)}; rounds {_line(rounds.trace)}")


if __name__ == "__main__":
    main(sys.argv[1:])
