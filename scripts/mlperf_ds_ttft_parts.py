"""Where a simulated MLPerf Server request's TTFT goes: waiting to be scheduled, then its prompt step; and the steps.

For each named row (a rate row of a check file), the run the model prices (one arrival draw) is played with the
simulator's step functions wrapped to record each request's admission (the start of the step that takes its
prompt) and each step's wall time, batch and prompt work. Printed: the mean TTFT, split for the middle 60% of the
run's arrivals into arrival -> admission (the attention-DP balancer's hold, the overlap scheduler's late fetch,
queueing) and admission -> first token (the prompt step and delivery); the decode steps' mean wall time and batch;
the prompt steps' mean wall time, decodes, prompt tokens and prompts; and TTFT percentiles. A diagnosis: nothing here
feeds a prediction.

    PYTHONPATH=. python scripts/mlperf_ds_ttft_parts.py tests/data/mlperf_v5_1_nvidia.csv mlp51-024 mlp51-042
"""

from __future__ import annotations

import argparse
import csv

import numpy as np

import autotune.cost.serving_sim as sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving


def _recorded_run(case):
    """The row's simulated trace, with each request's admission time and each step's (kind, wall s, decodes, work)."""
    admitted, steps = {}, []
    single, stretch = sim._single_step, sim._decode_stretch

    def single_step(st, sched, step, chunks, decodes):
        t0 = st.t
        for i, _ in chunks:
            admitted.setdefault(i, t0)
        out = single(st, sched, step, chunks, decodes)
        steps.append(("prompt", st.t - t0, len(decodes), sum(c[1] for c in chunks), len(chunks)))
        return out

    def decode_stretch(st, sched, step, decodes, fast_forward):
        t0, s0 = st.t, st.steps
        out = stretch(st, sched, step, decodes, fast_forward)
        k = max(st.steps - s0, 1)
        steps.append(("decode", (st.t - t0) / k, len(decodes), k, 0))
        return out

    sim._single_step, sim._decode_stretch = single_step, decode_stretch
    try:
        trace = run_serving(case.deployment, case.load).trace
    finally:
        sim._single_step, sim._decode_stretch = single, stretch
    return trace, admitted, steps


def report(row: dict) -> None:
    trace, admitted, steps = _recorded_run(case_from_row(row))
    arrival, ttft = trace.arrival_s, trace.first_token_s - trace.arrival_s
    ids = np.array(sorted(admitted))
    at = np.array([admitted[i] for i in ids])
    mid = (arrival[ids] > 0.2 * arrival.max()) & (arrival[ids] < 0.8 * arrival.max())
    print(f"{row['id']}: {len(arrival)} requests, mean TTFT {1e3 * np.nanmean(ttft):.1f} ms "
          f"(measured {float(row['value']) / 1e6:.1f} ms)" if row["metric"] == "ttft_mean" else
          f"{row['id']}: {len(arrival)} requests, mean TTFT {1e3 * np.nanmean(ttft):.1f} ms")
    print(f"  middle 60%: arrival -> admission {1e3 * np.mean(at[mid] - arrival[ids][mid]):.1f} ms, "
          f"admission -> first token {1e3 * np.mean(trace.first_token_s[ids][mid] - at[mid]):.1f} ms")
    dec = np.array([s[1:4] for s in steps if s[0] == "decode"])
    pro = np.array([s[1:] for s in steps if s[0] == "prompt"])
    w = dec[:, 2]
    print(f"  decode steps {int(w.sum())}: mean {1e3 * np.average(dec[:, 0], weights=w):.1f} ms at "
          f"{np.average(dec[:, 1], weights=w):.0f} decodes; prompt steps {len(pro)}: mean {1e3 * pro[:, 0].mean():.1f} ms, "
          f"{pro[:, 1].mean():.0f} decodes, {pro[:, 2].mean():.0f} prompt tokens in {pro[:, 3].mean():.2f} prompts")
    print("  TTFT ms min / p50 / p90 / p99: " + " / ".join(f"{1e3 * v:.0f}" for v in
                                                        (np.nanmin(ttft), *np.nanpercentile(ttft, [50, 90, 99]))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("ids", nargs="+")
    args = ap.parse_args()
    rows = {r["id"]: r for r in csv.DictReader(open(args.csv))}
    for rid in args.ids:
        report(rows[rid])


if __name__ == "__main__":
    main()
