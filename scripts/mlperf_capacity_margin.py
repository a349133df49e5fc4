"""How close an MLPerf Server (or Interactive) row ran to its engine's capacity, measured and priced.

A Server run that LoadGen marks VALID ran below its system's capacity (its p99 TTFT stayed within the
limit), but NVIDIA's target_qps sits a few percent under it (v5.0 Llama 2 70B: H200 x8 114.24 = 8 x the
one-GPU server_target_qps 14.28 of configs/llama2-70b/Server/__init__.py, 96% of its Offline run's rate;
H100 x8 at 100.5%), so a priced capacity a few percent low turns into a queue that grows for the whole run. For each row id given (a Server TTFT, TPOT or throughput row), per
stream the simulator runs (an instance, or one micro-batch of a pipeline instance):

* measured: the target rate, Little's law's operating point (decoding requests = output tokens/s x
  TPOT, prompt tokens a step = rate x mean prompt x TPOT) and the step there (the mean TPOT); the
  Offline row of the same system, where there is one, as tokens/s a stream and what a budget-full step
  costs at that rate (its engine may differ: a row's own config is printed beside it);
* priced: the model's step at the measured operating point, and its capacity: the rate at which every
  step runs the token budget in the dataset's prompt-to-output mix (decodes = budget x output / (prompt +
  output), capped by max_num_seqs and the KV cache), i.e. decodes / output length / step.

rho = target rate / capacity; a priced rho at or above 1 means the simulated queue grows through the run
(its TTFT then depends on how long the run is simulated: MAX_RATE_REQUESTS a replica). A diagnostic,
not a test: it prices steps, it does not simulate runs.

    PYTHONPATH=. python scripts/mlperf_capacity_margin.py tests/data/mlperf_v5_0_nvidia.csv mlp50-018 mlp50-037 \\
        tests/data/mlperf_v5_1_nvidia.csv mlp51-038
"""

from __future__ import annotations

import sys
from dataclasses import replace

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving
from autotune.spec.json_file import read_csv_file


def _system(row: dict) -> str:
    """The results path's system and benchmark without the scenario: '.../results/<system>/<benchmark>/'."""
    path = row["source"].split(" @")[0]
    return path.split("/results/")[1].split("/")[0] if "/results/" in path else ""


def _scenario(row: dict) -> str:
    return row["source"].split("/performance/")[0].rsplit("/", 1)[-1]


def _siblings(row: dict, rows: list[dict]) -> dict[str, dict]:
    """The same run's rows by metric, and the same system's Offline throughput row as 'offline'."""
    run = row["source"].split(" @")[0]
    found = {r["metric"]: r for r in rows if r["source"].split(" @")[0] == run}
    model = row["model"].replace("-interactive", "")
    offline = [r for r in rows if _system(r) == _system(row) and _scenario(r) == "Offline"
               and r["model"] == model and r["metric"] == "output_tokens_per_s"]
    if offline:
        found["offline"] = offline[0]
    return found


def _step_s(step, decodes: float, prompt: float, isl: float, osl: float) -> float:
    """The priced step with ``decodes`` requests half way through their outputs and ``prompt`` tokens of
    prompts chunked at mean depth (a chunk's queries see half the prompt before them on average)."""
    return step.gpu_s(decodes=round(decodes), context=decodes * (isl + osl / 2.0), prefill_tokens=round(prompt),
                      pairs=prompt * isl / 2.0, sampled=round(decodes + prompt / isl))


def _offline_line(offline: dict, dep, offered_per_gpu: float, decodes: float, streams: int) -> str:
    """The Offline row's tokens/s a GPU against the Server row's offered output tokens/s a GPU (measured rho),
    and, where its engine has the Server row's degrees, the budget-full step its rate implies."""
    off_dep = case_from_row(offline).deployment
    per_gpu = float(offline["value"]) / float(offline["gpus"])
    same = off_dep.tp == dep.tp and off_dep.pp == dep.pp
    step = f"; a budget-full step at that rate {1e3 * decodes * streams / float(offline['gpus']) / per_gpu:.1f} ms" if same \
        else f" (its engine TP {off_dep.tp} PP {off_dep.pp}: another engine)"
    return f"  Offline {offline['id']}: {per_gpu:.0f} output tokens/s a GPU, rho {offered_per_gpu / per_gpu:.3f}" + step


def report(row: dict, rows: list[dict]) -> list[str]:
    sib = _siblings(row, rows)
    case = case_from_row(sib.get("tpot_mean", row))
    dep, load = case.deployment, case.load
    run = run_serving(dep, replace(load, num_requests=1))
    step, limits = run.step, run.limits
    streams = dep.replicas * dep.pp
    isl, osl, rate = float(load.input_len), float(load.output_len), float(load.rate_per_s)
    lines = [f"{row['id']} {row['model'].split(' (')[0]} {row['gpu']} x{row['gpus']} {_scenario(row)}: {streams} streams "
             f"(TP {dep.tp} PP {dep.pp}), {rate:.3f} req/s each, ISL {isl:.0f} OSL {osl:.0f}, budget "
             f"{limits.max_num_batched_tokens} tokens, {limits.max_num_seqs} seqs, KV {limits.kv_capacity_tokens} tokens"]
    budget = limits.max_num_batched_tokens
    decodes = min(budget * osl / (isl + osl), limits.max_num_seqs, limits.kv_capacity_tokens / (isl + osl / 2.0))
    full = _step_s(step, decodes, min(budget - decodes, decodes * isl / osl), isl, osl)
    capacity = decodes / osl / full
    lines.append(f"  priced capacity {capacity:.3f} req/s a stream (full step {1e3 * full:.1f} ms: {decodes:.0f} decodes "
                 f"+ {min(budget - decodes, decodes * isl / osl):.0f} prompt tokens), rho {rate / capacity:.3f}")
    if "tpot_mean" in sib and "output_tokens_per_s" in sib:
        tpot = float(sib["tpot_mean"]["value"]) * case.unit_to_si
        out = float(sib["output_tokens_per_s"]["value"]) / streams
        b, p = out * tpot, rate * isl * tpot
        lines.append(f"  measured: {out:.0f} output tokens/s a stream, TPOT {1e3 * tpot:.1f} ms at ~{b:.0f} decodes + "
                     f"{p:.0f} prompt tokens a step; priced step there {1e3 * _step_s(step, b, p, isl, osl):.1f} ms")
    if "offline" in sib:
        lines.append(_offline_line(sib["offline"], dep, rate * streams * osl / float(row["gpus"]), decodes, streams))
    return lines


def main(argv: list[str]) -> None:
    rows: list[dict] = []
    for arg in argv:
        if arg.endswith(".csv"):
            rows.extend(read_csv_file(arg, "csv")[1])
        else:
            print("\n".join(report(next(r for r in rows if r["id"] == arg), rows)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
