"""One MLPerf Server (or Interactive) run's prompt path, priced against what the run and its system's Offline run
measured: the priced time of one mean prompt through the engine, chunk by chunk beside the run's measured decodes,
against the measured mean TTFT, and the priced budget-full prompt throughput against the Offline-implied one.

The operating point is the measured one: decodes a stream = completed tokens/s x mean TPOT / streams (Little's law;
streams = instances x pp micro-batches), each read at half the mean prompt + half the mean output cached positions.
A prompt's chunks take what max_num_tokens leaves the decodes (context_chunking_policy first_come_first_served).
Two timings of one prompt, alone in the queue:

* serial: one chunk a micro-batch step, each step crossing every layer (how serving_sim prices a pp micro-batch);
* pipelined (pp > 1): TensorRT-LLM keeps a context request that is still chunking out of the in-flight set, so its
  next chunk is scheduled in the next micro-batch while this one is in the later stages (NVIDIA/TensorRT-LLM
  @00825c4e cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp forwardAsync: "Context requests that
  are chunking are not added to inflight set, so they are scheduled in the next micro batch"): a chunk every
  stage (step / pp), the last crossing all pp stages.

usage: PYTHONPATH=. python scripts/diag_405b_prompt.py CSV SERVER_ROW_ID [OFFLINE_CSV OFFLINE_ROW_ID]
e.g.   PYTHONPATH=. python scripts/diag_405b_prompt.py tests/data/mlperf_v5_1_nvidia.csv mlp51-010 \
           tests/data/mlperf_v5_1_nvidia.csv mlp51-008"""

from __future__ import annotations

import csv
import sys

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_limits, replica_step_model


def _rows(path: str) -> dict[str, dict]:
    return {r["id"]: r for r in csv.DictReader(open(path, encoding="utf-8"))}


def _run_metrics(rows: dict[str, dict], row_id: str) -> dict[str, float]:
    """The measured metrics of the run (rows with the same source and load) behind ``row_id``."""
    key = (rows[row_id]["source"], rows[row_id]["concurrency_or_batch"])
    return {r["metric"]: float(r["value"]) for r in rows.values() if (r["source"], r["concurrency_or_batch"]) == key}


def _prompt_steps(step, budget: int, decodes: int, context: float, prompt: int) -> list[tuple[int, float]]:
    """(chunk tokens, step seconds) of one ``prompt``-token prompt chunked into what ``budget`` leaves ``decodes``."""
    done, out = 0, []
    room = max(1, budget - decodes)
    while done < prompt:
        chunk = min(room, prompt - done)
        pairs = chunk * (done + (chunk + 1) / 2.0)  # a chunk after `done` cached tokens (serving_step.py's docstring)
        out.append((chunk, step.gpu_s(decodes=decodes, context=decodes * context, prefill_tokens=chunk, pairs=pairs,
                                      sampled=decodes + 1)))
        done += chunk
    return out


def main(argv: list[str]) -> None:
    rows = _rows(argv[0])
    case = case_from_row(rows[argv[1]])
    dep, load = case.deployment, case.load
    measured = _run_metrics(rows, argv[1])
    limits = replica_limits(dep, load)
    budget, streams = limits.max_num_batched_tokens, dep.replicas * dep.pp
    decodes = round(measured["output_tokens_per_s"] * measured["tpot_mean"] * 1e-9 / streams)
    context = (load.input_len + load.output_len) / 2.0
    step = replica_step_model(dep, max_tokens=max(budget, decodes), max_sampled=budget + decodes)
    steps = _prompt_steps(step, budget, decodes, context, load.input_len)
    serial = sum(s for _, s in steps)
    pipelined = serial / dep.pp + steps[-1][1] * (dep.pp - 1) / dep.pp
    decode_only = step.gpu_s(decodes=decodes, context=decodes * context, prefill_tokens=0, pairs=0.0, sampled=decodes)
    print(f"{argv[1]} {dep.model.name} {rows[argv[1]]['gpu']} x{dep.gpus}: tp {dep.tp} pp {dep.pp} x {dep.replicas} "
          f"instances, max_num_tokens {budget}, mean prompt {load.input_len} / output {load.output_len}")
    print(f"  measured: {measured['output_tokens_per_s']:.0f} tokens/s, TTFT {measured['ttft_mean'] * 1e-9:.3f} s, "
          f"TPOT {measured['tpot_mean'] * 1e-6:.1f} ms -> {decodes} decodes a stream")
    print(f"  priced step at those decodes: decode-only {decode_only * 1e3:.1f} ms, with a full chunk "
          f"{steps[0][1] * 1e3:.1f} ms ({steps[0][0]} prompt tokens)")
    print(f"  one mean prompt alone: {len(steps)} chunks, serial {serial:.3f} s"
          + (f", pipelined over {dep.pp} stages {pipelined:.3f} s" if dep.pp > 1 else "")
          + f"; measured mean TTFT {measured['ttft_mean'] * 1e-9:.3f} s")
    full = _prompt_steps(step, budget, 0, context, budget)[0]
    priced_gpu = full[0] / full[1] / dep.tp  # pp micro-batches, each a full-model step, on tp x pp GPUs
    demand = measured["output_tokens_per_s"] / load.output_len * load.input_len / dep.gpus
    print(f"  prompt tokens/s a GPU: priced budget-full {priced_gpu:.0f} (no decodes), the run's demand {demand:.0f} "
          f"({demand / priced_gpu:.2f} of it)")
    if len(argv) > 3:
        off_rows = _rows(argv[2])
        off = case_from_row(off_rows[argv[3]])
        tps = float(off_rows[argv[3]]["value"])
        implied = tps / off.load.output_len * off.load.input_len / off.deployment.gpus
        print(f"  Offline {argv[3]} (tp {off.deployment.tp} pp {off.deployment.pp}): {tps:.0f} tokens/s -> "
              f"{implied:.0f} prompt tokens/s a GPU (and its decodes), {implied / priced_gpu:.2f} of the Server "
              f"engine's priced budget-full rate")


if __name__ == "__main__":
    main(sys.argv[1:])
