"""A check row's simulated run in the figures `vllm bench serve` prints beside its one check figure: duration,
TTFT and ITL (mean / median / P99), mean TPOT, plus the engine's limits and the prompt tokens run, so that a row's
miss can be placed (the steps' length: the ITL median and P99 of prompt-heavy runs; the prompt phase: the P99
TTFT; KV-bound admission: the limits and the mean running decodes). One draw (the load's seed).

usage: python scripts/serving_row_trace.py CSV ROW_ID [ROW_ID ...]"""

from __future__ import annotations

import csv
import sys

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(np.searchsorted(cumulative, q), len(values) - 1)])


def describe(row: dict) -> str:
    case = case_from_row(row)
    run = run_serving(case.deployment, case.load)
    t, lim = run.trace, run.limits
    ttft, itl, w = t.ttft_s * 1e3, t.itl_s * 1e3, t.itl_weight
    return (f"{row['id']} {case.deployment.runtime.name} {row['metric']} {row['value']}\n"
            f"  limits: {lim.max_num_seqs} seqs, {lim.max_num_batched_tokens} tokens a step, KV {lim.kv_capacity_tokens} tokens\n"
            f"  duration {t.duration_s:.2f} s, {t.steps} steps, {t.mean_running:.1f} decoding on average, "
            f"prompt tokens run {t.prefilled_tokens} of {int(t.input_len.sum())}, output {int(t.output_len.sum())}\n"
            f"  TTFT ms mean / median / P99: {ttft.mean():.0f} / {np.median(ttft):.0f} / {np.percentile(ttft, 99):.0f}\n"
            f"  ITL ms mean / median / P99: {(itl * w).sum() / w.sum():.1f} / {weighted_quantile(itl, w, 0.5):.1f} / "
            f"{weighted_quantile(itl, w, 0.99):.1f}; mean TPOT {t.tpot_s.mean() * 1e3:.1f}")


def main() -> None:
    rows = {r["id"]: r for r in csv.DictReader(open(sys.argv[1], encoding="utf-8"))}
    for row_id in sys.argv[2:]:
        print(describe(rows[row_id]))


if __name__ == "__main__":
    main()
