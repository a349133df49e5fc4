"""Where a priced serving row's simulated time goes: prompt steps against decode steps, the mean decode
batch, and the TTFT and streamed-gap quantiles of one run (the first arrival draw).

    python scripts/serving_time_split.py tests/data/serving_runs.csv sgl060-014 sgl060-007

A diagnosis aid (issue 31): it wraps the simulator's private step functions to time them, so it reads
the simulation as it is and changes nothing.
"""

from __future__ import annotations

import argparse
import csv

import numpy as np

import autotune.cost.serving_sim as sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving

_TOTALS = dict(prompt_s=0.0, prompt_steps=0, prompt_tokens=0, decode_s=0.0, decode_steps=0, decode_rows=0, late_s=0.0)


def _timed(original, prompt: bool):
    def wrapper(st, sched, step, *args):
        t0, steps0 = st.t, st.steps
        finished = original(st, sched, step, *args)
        if prompt:
            _TOTALS["prompt_s"] += st.t - t0
            _TOTALS["prompt_steps"] += 1
            _TOTALS["prompt_tokens"] += sum(take for _, take in args[0])
        else:
            _TOTALS["decode_s"] += st.t - t0
            _TOTALS["decode_steps"] += st.steps - steps0
            _TOTALS["decode_rows"] += len(args[0]) * (st.steps - steps0)
        return finished
    return wrapper


def _timed_late(original):
    def wrapper(st, sched, step):
        t0 = st.t
        original(st, sched, step)
        _TOTALS["late_s"] += st.t - t0
    return wrapper


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return [float(values[order][min(np.searchsorted(cumulative, q), len(values) - 1)]) for q in qs]


def split(row: dict) -> str:
    for key in _TOTALS:
        _TOTALS[key] = 0
    case = case_from_row(row)
    trace = run_serving(case.deployment, case.load).trace
    t = _TOTALS
    qs = (0.1, 0.5, 0.9)
    itl = _weighted_quantiles(trace.itl_s, trace.itl_weight, qs) if len(trace.itl_s) else [float("nan")] * 3
    return (f"{row['id']} {row['metric']} measured {row['value']}: run {trace.duration_s:.1f} s; "
            f"prompt steps {t['prompt_steps']} ({t['prompt_s']:.1f} s, {t['prompt_tokens']} tokens), "
            f"decode steps {t['decode_steps']} ({t['decode_s']:.1f} s, "
            f"{1e3 * t['decode_s'] / max(1, t['decode_steps']):.2f} ms each, mean batch "
            f"{t['decode_rows'] / max(1, t['decode_steps']):.1f}); late-finish calls {t['late_s']:.2f} s; TTFT p10/p50/p90 ms "
            f"{' / '.join(f'{v:.1f}' for v in np.percentile(trace.ttft_s * 1e3, [10, 50, 90]))}; "
            f"gap p10/p50/p90 ms {' / '.join(f'{1e3 * v:.1f}' for v in itl)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="a serving CSV (tests/data/serving_runs.csv's columns)")
    parser.add_argument("ids", nargs="+", help="row ids to split")
    args = parser.parse_args()
    sim._single_step = _timed(sim._single_step, prompt=True)
    sim._decode_stretch = _timed(sim._decode_stretch, prompt=False)
    sim._late_call = _timed_late(sim._late_call)
    rows = {r["id"]: r for r in csv.DictReader(open(args.csv, newline=""))}
    for row_id in args.ids:
        print(split(rows[row_id]))


if __name__ == "__main__":
    main()
