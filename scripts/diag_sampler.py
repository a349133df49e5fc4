"""The greedy sampler's share of a decode step (cost/serving_sampler.py), per check row's deployment.

For each row (default: the vLLM bursts of tests/data/vllm_newer_check.csv) the row's deployment is built as
check-published builds it, and a decode step of B sequences at 1,000 cached positions each is priced with and
without the engine's sampler passes: the seconds the sampler adds and its share of the step's GPU time.
A diagnosis of how much a batch-growing cost the sampler is; nothing fitted (docs/serving.md, "The sampler per
step").

  python scripts/diag_sampler.py [--file CSV] [--batch B ...] [ROW ...]
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace
from pathlib import Path

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
BURST_ROWS = ("vn-go-01", "vn-go-05", "vn-go-07", "vn-ds-01", "vn-qw-01", "vn-qw-03", "vn-qw-04", "vn-b2-01")


def _without_sampler(dep):
    serving = replace(dep.runtime.serving, sampler_pass_bytes=(), logits_gather_copy_bytes=0.0)
    return replace(dep, runtime=replace(dep.runtime, serving=serving))


def step_gpu_s(dep, batch: int) -> float:
    step = replica_step_model(dep, max_tokens=batch, max_sampled=batch)
    return step.gpu_s(decodes=batch, context=1000.0 * batch, prefill_tokens=0, pairs=0.0, sampled=batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default="vllm_newer_check.csv")
    parser.add_argument("--batch", type=int, nargs="*", default=[64, 256, 900])
    parser.add_argument("rows", nargs="*")
    args = parser.parse_args()
    with open(DATA / args.file, newline="") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    for row_id in args.rows or [r for r in BURST_ROWS if r in rows]:
        dep = case_from_row(rows[row_id]).deployment
        s = dep.runtime.serving
        cells = []
        for b in args.batch:
            on, off = step_gpu_s(dep, b), step_gpu_s(_without_sampler(dep), b)
            cells.append(f"B={b}: {off * 1e3:7.2f} ms +{(on - off) * 1e3:.3f} ({(on / off - 1) * 100:.2f}%)")
        print(f"{row_id:9s} {dep.model.name:28s} tp={dep.tp} {dep.runtime.name:12s} passes={list(s.sampler_pass_bytes)}"
              f" copy={s.logits_gather_copy_bytes:g} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
