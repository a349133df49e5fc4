"""Where a SGLang check row's TTFT goes, measured beside simulated (docs/serving.md, sglttft44).

Measured: a closed-loop arrival under ``--scheduler-recv-interval N`` waits for the scheduler's next poll (every N
decode steps; at once after a prompt step or while idle: scheduler_recv_skipper.py, 0.5.12 wheel), then one prompt
step runs it. So TTFT - (N / 2) x TPOT (the row's own TPOT, or the one its throughput implies by Little's law:
concurrency / (requests a second) = TTFT + (output - 1) x TPOT) is the prompt step the run implies; at concurrency 1
the scheduler idles and the TTFT is the prompt step. Simulated: the mean wait from arrival to the start of the step
that completes the prompt, and that step's wall time to the first token's delivery (autotune/cost/serving_sim.py).

usage: python scripts/sglang_ttft_split.py CSV [CSV ...]   (every ttft_mean row of engine sglang)"""

from __future__ import annotations

import csv
import re
import sys

import numpy as np

import autotune.cost.serving_sim as sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving

_STARTS: dict[int, float] = {}


def _recording(single_step):
    """serving_sim._single_step, noting when the step that completes each request's prompt began."""
    def step(st, sched, model, chunks, decodes):
        began = st.t
        finished = single_step(st, sched, model, chunks, decodes)
        for i, _ in chunks:
            if st.done[i] >= st.prompt[i] and i not in _STARTS:
                _STARTS[i] = began
        return finished
    return step


def _siblings(rows: list[dict], row: dict) -> dict[str, float]:
    """The same run's other metrics (same GPU, layout, version, lengths and load)."""
    keys = ("gpu", "tp", "ep", "precision", "engine_version", "isl", "osl", "concurrency_or_batch")
    return {r["metric"]: float(r["value"]) for r in rows if all(r[k] == row[k] for k in keys)}


def _tpot_s(row: dict, siblings: dict[str, float], output_len: float) -> float | None:
    """The row's TPOT, stated or from its per-GPU output throughput by Little's law."""
    if "tpot_mean" in siblings:
        return siblings["tpot_mean"] / 1e3
    tokens = siblings.get("output_tokens_per_s")
    conc = re.search(r"concurrency (\d+)", row["concurrency_or_batch"])
    if tokens is None or conc is None:
        return None
    rate = tokens * int(row["gpus"]) / output_len  # requests a second
    return (int(conc.group(1)) / rate - float(row["value"]) / 1e3) / (output_len - 1)


def split(rows: list[dict], row: dict) -> str:
    case = case_from_row(row)
    _STARTS.clear()
    trace = run_serving(case.deployment, case.load).trace
    ids = np.array(sorted(_STARTS))
    start = np.array([_STARTS[i] for i in ids])
    wait, step = (start - trace.arrival_s[ids]).mean() * 1e3, (trace.first_token_s[ids] - start).mean() * 1e3
    recv = re.search(r"scheduler-recv-interval[ =](\d+)", row["notes"])
    n = int(recv.group(1)) if recv else 1
    ttft = float(row["value"])
    tpot = _tpot_s(row, _siblings(rows, row), float(case.load.output_len))
    idle = row["concurrency_or_batch"].strip() == "concurrency 1"
    implied = ttft if idle else (None if tpot is None else ttft - n / 2 * tpot * 1e3)
    shown = "n/a" if implied is None else f"{implied:.0f}"
    return (f"{row['id']:11s} {row['gpu']:5s} TP{row['tp']} {row['precision']:5s} {row['engine_version']:7s} "
            f"isl {row['isl']:5s} {row['concurrency_or_batch']:15s} recv {n:2d} | measured {ttft:7.1f}, "
            f"implied prompt step {shown:>5s} | simulated {trace.ttft_s.mean() * 1e3:6.1f} = wait {wait:5.1f} "
            f"+ prompt step {step:5.1f}")


def main() -> None:
    sim._single_step = _recording(sim._single_step)
    for path in sys.argv[1:]:
        rows = list(csv.DictReader(open(path, encoding="utf-8")))
        for row in rows:
            if row["engine"].lower() == "sglang" and row["metric"] == "ttft_mean":
                print(split(rows, row))


if __name__ == "__main__":
    main()
