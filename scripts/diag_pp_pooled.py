"""A diagnosis (no prediction changes): a pipeline-parallel TensorRT-LLM instance priced as one pooled stream instead
of pp independent micro-batch streams, at a Server row's rate (or the rates given).

serving_sim prices a pp > 1 instance as pp streams, each a micro-batch with its own Poisson share of the requests,
one prompt chunk a micro-batch step, each step crossing every layer (serving_eval.ServingDeployment). TensorRT-LLM's
micro-batches draw from one request list (NVIDIA/TensorRT-LLM @00825c4e cpp/tensorrt_llm/batch_manager/
trtGptModelInflightBatching.cpp forwardAsync: the micro-batch scheduler runs over the instance's active requests
less mInflightReqIds, the set of all in-flight micro-batches' requests), and a context request that is still
chunking is left out of that set, "so they are scheduled in the next micro batch": a prompt takes a chunk in every
micro-batch, pp chunks a pipeline round, where a decode takes one token a round.

The pooled stream here: the instance's requests (pp x a stream's rate) on one simulated stream whose step is a
round of pp micro-batches, with pp x the token budget, sequences and KV room, the round lasting one micro-batch's
step at 1/pp of the round's decodes, prompt tokens, pairs and cached positions (serving_step.StepModel.gpu_s at a
micro-batch's share; the decode stretch's per-position slope likewise / pp). The instance's requests still arrive
as one Poisson stream (no least-in-flight dispatch over instances in either pricing).

usage: PYTHONPATH=. python scripts/diag_pp_pooled.py CSV ROW_ID [RATE_SCALE ...]
e.g.   PYTHONPATH=. python scripts/diag_pp_pooled.py tests/data/mlperf_v5_0_nvidia.csv mlp50-010 1.0 0.67"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import replace

import numpy as np

import autotune.cost.serving_eval as se
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_load import metric_value, requests_for
from autotune.cost.serving_sim import simulate


class _Round:
    """A pooled stream's step: pp micro-batches, each a full-model step at 1/pp of the round's work."""

    def __init__(self, inner, pp: int) -> None:
        self._inner, self._pp = inner, pp
        self.max_tokens = inner.max_tokens * pp
        self.decode_s_per_position = inner.decode_s_per_position / pp

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def gpu_s(self, *, decodes, context, prefill_tokens, pairs, sampled, rank_prefill=None, prefix_tokens=0.0):
        p = self._pp
        d = math.ceil(decodes / p)  # a micro-batch's share, its tokens within its own budget
        tokens = min(math.ceil((decodes + prefill_tokens) / p), self._inner.max_tokens)
        return self._inner.gpu_s(decodes=d, context=context / p,
                                 prefill_tokens=max(0, tokens - d) if prefill_tokens else 0, pairs=pairs / p,
                                 sampled=math.ceil(sampled / p), prefix_tokens=prefix_tokens / p)


def _captured(dep, load):
    """The stream run of the model as priced, and the (schedule, step) it simulated."""
    seen = {}
    original = se._client_trace

    def capture(engine, sent, schedule, step):
        seen["schedule"], seen["step"] = schedule, step
        return original(engine, sent, schedule, step)

    se._client_trace = capture
    try:
        run = se.run_serving(dep, load)
    finally:
        se._client_trace = original
    return run, seen["schedule"], seen["step"]


def main(argv: list[str]) -> None:
    rows = {r["id"]: r for r in csv.DictReader(open(argv[0], encoding="utf-8"))}
    case = case_from_row(rows[argv[1]])
    dep, base = case.deployment, case.load
    pp = dep.pp
    print(f"{argv[1]} tp {dep.tp} pp {pp} x {dep.replicas}; a stream's rate {base.rate_per_s:.4f}/s; measured "
          f"{rows[argv[1]]['metric']} {rows[argv[1]]['value']}")
    for scale in [float(a) for a in argv[2:]] or [1.0]:
        load = replace(base, rate_per_s=base.rate_per_s * scale)
        run, schedule, step = _captured(dep, load)
        pooled = replace(schedule, max_num_seqs=schedule.max_num_seqs * pp,
                         max_num_batched_tokens=schedule.max_num_batched_tokens * pp,
                         kv_capacity_tokens=schedule.kv_capacity_tokens * pp)
        merged = replace(load, rate_per_s=load.rate_per_s * pp, num_requests=load.num_requests * pp)
        trace = simulate(requests_for(merged), pooled, _Round(step, pp))
        got = {m: (metric_value(run.trace, m), metric_value(trace, m)) for m in ("ttft_mean", "tpot_mean")}
        p99 = [float(np.nanpercentile(t.first_token_s - t.arrival_s, 99)) for t in (run.trace, trace)]
        print(f"  rate x{scale:.2f}: TTFT streams {got['ttft_mean'][0]:.3f} s (p99 {p99[0]:.2f}) / pooled "
              f"{got['ttft_mean'][1]:.3f} s (p99 {p99[1]:.2f}); "
              f"TPOT streams {got['tpot_mean'][0] * 1e3:.1f} ms / pooled {got['tpot_mean'][1] * 1e3:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
