"""A check row's simulated prompt steps by phase of the run: how many, their wall seconds, their mean prompt tokens
and mean wall time, in windows of the run's clock. Shows where a KV-bound burst spends its time once admission
trickles (docs/serving.md, "SGLang 0.5.3-0.5.5's graphs and reserve": 200 prompt steps of ~400 tokens at the
eager-issue floor). A diagnosis, nothing fitted or priced. One draw (the load's seed).

  python scripts/diag_prompt_steps.py CSV ROW_ID [--windows 0,5,35,1000]
"""

from __future__ import annotations

import argparse
import csv

import numpy as np

import autotune.cost.serving_sim as serving_sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import eager_issue_s, run_serving


def prompt_steps(row: dict) -> np.ndarray:
    """(start s, wall s, prompt tokens, decodes) of every prompt step of the row's simulated run."""
    steps, single = [], serving_sim._single_step

    def recorded(st, sched, step, chunks, decodes):
        start = st.t
        finished = single(st, sched, step, chunks, decodes)
        steps.append((start, st.t - start, float(np.asarray(chunks)[:, 1].sum()), float(len(decodes))))
        return finished

    serving_sim._single_step = recorded
    try:
        case = case_from_row(row)
        run_serving(case.deployment, case.load)
    finally:
        serving_sim._single_step = single
    return np.asarray(steps, dtype=float).reshape(-1, 4)


def window_lines(steps: np.ndarray, edges: list[float]) -> list[str]:
    lines = []
    for lo, hi in zip(edges, edges[1:]):
        inside = steps[(steps[:, 0] >= lo) & (steps[:, 0] < hi)]
        if len(inside):
            lines.append(f"  {lo:g}-{hi:g} s: {len(inside)} prompt steps, {inside[:, 1].sum():.1f} s, mean "
                         f"{inside[:, 2].mean():.0f} prompt tokens, mean step {1e3 * inside[:, 1].mean():.1f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("row_id")
    parser.add_argument("--windows", default="0,5,35,1000", help="window edges, s")
    args = parser.parse_args()
    with open(args.csv, newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["id"] == args.row_id)
    steps = prompt_steps(row)
    issue_ms = 1e3 * eager_issue_s(case_from_row(row).deployment)
    print(f"{args.row_id}: {len(steps)} prompt steps, {steps[:, 1].sum():.1f} s; eager issue {issue_ms:.1f} ms a step")
    print("\n".join(window_lines(steps, [float(x) for x in args.windows.split(",")])))


if __name__ == "__main__":
    main()
