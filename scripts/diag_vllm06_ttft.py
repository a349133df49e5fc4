"""vLLM 0.6.0 under --num-scheduler-steps 10 at 4 / 8 requests/s: where the model's median TTFT goes.

SGLang's benchmark of SGLang 0.3.0 against vLLM 0.6.0 (sgl-project/sglang benchmark/benchmark_vllm_060/README.md
@120affb9613c, 'Online benchmark results') publishes, for both engines at each rate, the median TTFT, TPOT and
ITL; serving_runs.csv holds some of them as check rows (sgl060-*), the rest are typed below from the same
tables. Under multi-step a request that arrives during a decode call waits for the call's end (llm_engine.py
``step`` 0.6.0 schedules only when no steps remain), so its TTFT is about half a call (the median ITL is a call
and the prompt steps between calls) plus its own prompt step. The script prints, for each rate row, the
published medians, the model's, ``TTFT - ITL / 2`` on both sides beside SGLang's published TTFT at the same
load, and the model's TTFT split into the wait before the request's prompt step, the prompt step and the
delivery after it (serving_host.delivery_delay_s). A diagnosis, nothing fitted: docs/serving.md, 'vLLM 0.6's
multi-step TTFT, decomposed'.

  python scripts/diag_vllm06_ttft.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import autotune.cost.serving_sim as serving_sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import arrival_draws, expected_metric

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"

# (engine, GPU, rate) -> published medians (TTFT, TPOT, ITL) in ms: the README's two 'Online benchmark results'
# tables @120affb9613c (the vLLM A100 TPOT / ITL and every SGLang A100 TPOT / ITL are not check rows)
PUBLISHED = {
    ("vllm", "A100-80GB", 4): (100.48, 14.14, 129.32), ("vllm", "A100-80GB", 8): (120.39, 17.09, 158.63),
    ("vllm", "H100-80GB", 4): (179.15, 23.58, 231.23), ("vllm", "H100-80GB", 8): (207.12, 29.15, 275.32),
    ("sglang", "A100-80GB", 4): (31.98, 13.17, 11.93), ("sglang", "A100-80GB", 8): (35.68, 17.85, 14.41),
    ("sglang", "H100-80GB", 4): (53.94, 25.03, 21.67), ("sglang", "H100-80GB", 8): (58.11, 33.07, 24.45),
}


class _PromptSteps:
    """(start, end, request ids) of every prompt step of the simulator's runs, recorded around
    serving_sim._single_step."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, float, list[int]]] = []

    def __enter__(self) -> _PromptSteps:
        self._single = serving_sim._single_step

        def single(st, sched, step, chunks, decodes):
            start = st.t
            finished = self._single(st, sched, step, chunks, decodes)
            self.steps.append((start, st.t, [int(i) for i, _ in chunks]))
            return finished

        serving_sim._single_step = single
        return self

    def __exit__(self, *exc) -> None:
        serving_sim._single_step = self._single


def ttft_split_ms(row: dict) -> dict:
    """The model's medians (TTFT, TPOT, ITL, ms) over the row's Poisson draws, and its first draw's median
    wait before a request's prompt step, prompt step and delivery after it (ms)."""
    case = case_from_row(row)
    with _PromptSteps() as rec:
        runs = arrival_draws(case.deployment, case.load)
    medians = [expected_metric(runs, m) * 1e3 for m in ("ttft_median", "tpot_median", "itl_median")]
    trace = runs[0].trace
    n = len(trace.arrival_s)
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    for a, b, ids in rec.steps[:_first_run_steps(rec.steps, n)]:
        start[ids], end[ids] = a, b  # a request's last prompt step (a recomputed one prefills again)
    parts = (start - trace.arrival_s, end - start, trace.first_token_s - end)
    return dict(medians=medians, split=[float(np.nanmedian(p)) * 1e3 for p in parts])


def _first_run_steps(steps: list, n: int) -> int:
    """How many of the recorded prompt steps belong to the first draw: until every request was prefilled once."""
    seen: set[int] = set()
    for k, (_, _, ids) in enumerate(steps):
        seen.update(ids)
        if len(seen) >= n:
            return k + 1
    return len(steps)


def _rate_rows() -> list[dict]:
    with open(DATA / "serving_runs.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["id"].startswith("sgl060") and r["metric"] == "ttft_median"]
    return [r for r in rows if "RPS" in r["concurrency_or_batch"]]


def main() -> None:
    print("row          engine  GPU        RPS  published TTFT/TPOT/ITL  model TTFT/TPOT/ITL   TTFT-ITL/2 pub / model"
          "  model: wait + prompt step + delivery (medians)")
    for row in _rate_rows():
        rate = int(row["concurrency_or_batch"].split()[2])
        pub = PUBLISHED[(row["engine"], row["gpu"], rate)]
        got = ttft_split_ms(row)
        med, split = got["medians"], got["split"]
        print(f"{row['id']}  {row['engine']:6s}  {row['gpu']:9s}  {rate:3d}  "
              f"{pub[0]:6.1f}/{pub[1]:5.2f}/{pub[2]:6.1f}    {med[0]:6.1f}/{med[1]:5.2f}/{med[2]:6.1f}   "
              f"{pub[0] - pub[2] / 2:6.1f} / {med[0] - med[2] / 2:6.1f}      "
              f"{split[0]:6.1f} + {split[1]:5.1f} + {split[2]:4.1f}")
    for gpu in ("A100-80GB", "H100-80GB"):
        for rate in (4, 8):
            print(f"SGLang 0.3.0 published TTFT, {gpu} at {rate} RPS: {PUBLISHED[('sglang', gpu, rate)][0]:.1f} ms")


if __name__ == "__main__":
    main()
