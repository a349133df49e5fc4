"""How close a max-load attention-DP row sits to its KV-cache cliff (issue 31, trtep44; a diagnosis, nothing here
feeds a prediction).

A max-load run queues every request at once; under GUARANTEED_NO_EVICT each running request holds its whole
ISL + OSL in the KV cache, so the run's mean batch steps down when the cache no longer holds all of them. For each
row this prints the priced KV capacity against what the requests need, then re-prices the run with the KV share of
free memory lowered (0.95, the page's setting, then 0.90, the trtllm-bench default, 0.85, 0.80): the mean running
batch, the priced duration, the duration the measured rate implies and the resulting error. ``--ep-tp`` reads a
blank ``ep`` cell as ep = tp (the DEP reading of the 1.0 page's MoE rows).

    PYTHONPATH=. python scripts/adp_kv_margin.py tests/data/trtllm_pytorch_versions_check.csv trt1x-011 trt1x-013
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_limits, run_serving

FRACTIONS = (0.95, 0.90, 0.85, 0.80)


def report(row: dict, ep_tp: bool) -> list[str]:
    """The row's KV margin and its priced run at each KV share of free memory."""
    if ep_tp and not row["ep"].strip():
        row = {**row, "ep": row["tp"]}
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    rate = float(row["value"]) * (dep.gpus if "GPU" in row["unit"] else 1)
    limits = replica_limits(dep, load)
    requests = run_serving(dep, load).trace
    need = min(len(requests.input_len), limits.max_num_seqs) * (load.input_len + load.output_len)
    lines = [f"{row['id']} {dep.model.name} {dep.cluster.device.name} tp {dep.tp} ep {dep.ep} attention_dp "
             f"{dep.attention_dp}, {load.input_len}/{load.output_len}: KV {limits.kv_capacity_tokens} tokens, the "
             f"requests need {need} at once ({limits.kv_capacity_tokens / need:.2f}x), max_num_seqs "
             f"{limits.max_num_seqs}"]
    for fraction in FRACTIONS:
        serving = replace(dep.runtime.serving, memory_fraction=fraction)
        run = run_serving(replace(dep, runtime=replace(dep.runtime, serving=serving)), load).trace
        implied = float(run.output_len.sum()) / rate
        lines.append(f"  KV share {fraction:.2f}: running {float(run.mean_running):6.0f}, priced {run.duration_s:7.1f} s, "
                     f"measured {implied:7.1f} s, error {100.0 * (implied / run.duration_s - 1.0):+6.1f}%")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--ep-tp", action="store_true", help="read a blank ep cell as ep = tp")
    args = parser.parse_args()
    rows = {r["id"]: r for r in csv.DictReader(open(args.csv, encoding="utf-8", newline=""))}
    for row_id in args.ids:
        print("\n".join(report(rows[row_id], args.ep_tp)))


if __name__ == "__main__":
    main()
