"""What an MLPerf Offline row's measured throughput asks of a GPU, beside what autotune prices: Hopper llama2-70b,
v4.1 against v5.0 on the same systems (issue 31, mlp50h43).

For each Offline row given, prints the measured tokens a GPU runs a second (output and, at the dataset's mean
lengths, prompt tokens), the dense FLOP rate that implies (2 x the model's parameters a token, attention and the
LM head's gather aside), and the same from the priced run (one draw, as check-published simulates it), with the
priced run's step length and tokens a step. A Hopper GPU's FP8 GEMMs price at the profile's fit (1340 TFLOP/s
asymptote measured with cuBLASLt) times its kernel_efficiency 0.84 (~1126 TFLOP/s): a measured rate near or above
that says the engine's per-token cost, not its scheduling, is what the model misses. A diagnostic, not a test.

    PYTHONPATH=. python scripts/mlperf_hopper_token_cost.py tests/data/serving_runs.csv mlp41-001 mlp41-005 \\
        tests/data/mlperf_v5_0_nvidia.csv mlp50-035 mlp50-016
"""

from __future__ import annotations

import sys

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving
from autotune.spec.json_file import read_csv_file


def report(row: dict) -> str:
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    gpus = int(row["gpus"])
    flops_per_token = 2.0 * dep.model.num_parameters()
    prompt_share = float(load.input_len) / float(load.output_len)  # prompt tokens an output token, dataset means
    measured = float(row["value"]) / gpus * (1.0 + prompt_share)
    run = run_serving(dep, load)
    t = run.trace
    tokens = float(t.prefilled_tokens + t.output_len.sum())
    replica_gpus = dep.tp * dep.pp
    priced = tokens * dep.pp / t.duration_s / replica_gpus  # pp micro-batches in flight on tp x pp GPUs
    return (f"{row['id']} {dep.runtime.name} {row['gpu']} TP {dep.tp} PP {dep.pp} {dep.dtype}: tokens/s a GPU measured "
            f"{measured:.0f} ({measured * flops_per_token / 1e12:.0f} TFLOP/s dense), priced {priced:.0f} "
            f"({priced * flops_per_token / 1e12:.0f} TFLOP/s); priced step {1e3 * t.duration_s / t.steps:.1f} ms, "
            f"{tokens / t.steps:.0f} tokens a step (budget {run.limits.max_num_batched_tokens}, "
            f"{run.limits.max_num_seqs} seqs, KV {run.limits.kv_capacity_tokens} tokens)")


def main(argv: list[str]) -> None:
    rows: dict[str, dict] = {}
    for arg in argv:
        if arg.endswith(".csv"):
            rows.update({r["id"]: r for r in read_csv_file(arg, "csv")[1]})
        else:
            print(report(rows[arg]))


if __name__ == "__main__":
    main(sys.argv[1:])
