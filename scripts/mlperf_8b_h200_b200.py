"""MLPerf v5.1 Llama 3.1 8B through NVIDIA's llmlib harness on two GPUs: where the B200 rows' misses come from.

NVIDIA's B200 rows (mlp51-015..021: NVFP4 TensorRT engine, 8 instances of TP 1, Offline priced +43%, Server and
Interactive latencies 75-98% low) beside HPE's Cray XD670 H200 run of the same harness and benchmark (FP8 TensorRT
engine, 8 instances of TP 1, TensorRT 10.11, CUDA 12.9: mlcommons/inference_results_v5.1 @965182b03376
closed/HPE/configs/HPE_Cray_XD670_H200_SXM_141GBx8/{Offline,Server,Interactive}/llama3_1-8b.py: gpu_batch_size 2048,
max_num_tokens 12000, kvcache_free_gpu_mem_frac 0.99, enable_chunked_context True, precision 'fp8';
results/HPE_Cray_XD670_H200_SXM_141GBx8_TRT/llama3.1-8b/*/performance/run_1/mlperf_log_summary.txt). Both run
the llmlib TRTLLM_EXECUTOR core (code/llama3_1-8b/tensorrt/__init__.py DEFAULT_CORE_TYPE), so the harness's host
path (one Python process, a response thread a core, streaming in Server / Interactive only: code/llmlib/config.py
``streaming &= scenario != Offline``) is the same; what differs is the GPU, the weights' format and the kernels.

First, every 8 x B200 Server / Interactive run of the benchmark in v5.1 (nine submitters, NVIDIA's config
unchanged): its TTFT, TPOT and LoadGen's shortest TPOT (x 127: the least time a request's later tokens were seen
in), and the model's step at the run's own point against its TPOT, with the factor on the linear layers alone
that would close it. Then, for NVIDIA's B200 and HPE's H200 runs: the measured throughput, TTFT and TPOT; by Little's law the decoding requests an instance holds
(tokens/s x TPOT) and the prompt tokens a step carries at that point (rate x mean prompt x TPOT); the model's GPU
step there (serving_step.StepModel.gpu_s) against the measured TPOT; and the run as check-published prices it.
For the Offline run, the step the measured rate implies at the full token budget (the budget over the tokens a
request takes, 871 + 128, is the requests a step finishes) against the priced budget-full step.
A diagnosis: nothing here feeds a prediction. It simulates six runs (a few minutes).

    PYTHONPATH=. python scripts/mlperf_8b_h200_b200.py
"""

from __future__ import annotations

import csv
from dataclasses import replace

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import arrival_draws, expected_metric, run_serving

_CSV = "tests/data/mlperf_v5_1_nvidia.csv"
_B200 = {"offline": "mlp51-015", "server": ("mlp51-016", "mlp51-017", "mlp51-018"),
         "interactive": ("mlp51-019", "mlp51-020", "mlp51-021")}
# HPE Cray XD670 (8 x H200-SXM-141GB), MLPerf v5.1 closed, llama3.1-8b mlperf_log_summary.txt @965182b03376:
# Offline 'Tokens per second'; Server (target_qps 505) and Interactive (415) 'Completed tokens per second',
# 'Mean First Token latency (ns)', 'Mean Time to Output Token (ns)'
_H200 = {"offline": (66036.8, None, None, None), "server": (64914.57, 177715285, 74642712, 505),
         "interactive": (53475.21, 42735879, 23958449, 415)}
_H200_LIMITS = dict(max_num_seqs=2048, max_num_batched_tokens=12000, memory_fraction=0.99, chunked_prefill=True)
# Every 8 x B200 llama3.1-8b Server / Interactive result of MLPerf v5.1 closed (all NVIDIA's llmlib harness with the
# same published config as NVIDIA's: gpu_batch_size 6000, max_num_tokens 12000, kvcache 0.9, NVFP4, max_util;
# closed/<submitter>/configs/<system>/Server/llama3_1-8b.py @965182b03376): (submitter/system, scenario, target
# qps, 'Completed tokens per second', 'Mean First Token latency', 'Mean Time to Output Token', 'Min Time to
# Output Token' (ms)) from closed/<submitter>/results/<system>/llama3.1-8b/<scenario>/performance/run_1/
# mlperf_log_summary.txt; the host CPU from closed/<submitter>/systems/<system>.json
_B200_RUNS = (
    ("NVIDIA B200-SXM-180GBx8_TRT (2x Xeon 8570)", "Server", 1000, 128540.95, 586.774, 28.4826, 3.4654),
    ("Google B200-SXM-180GBx8_TRT (2x Xeon 8570)", "Server", 930, 119628.05, 595.669, 22.7029, 0.2412),
    ("Oracle B200-SXM-180GBx8_TRT (2x Xeon 8570)", "Server", 1000, 128649.18, 59.828, 24.8803, 8.8411),
    ("Dell XE9680L (2x Xeon 8562Y+)", "Server", 1000, 128786.80, 512.507, 27.0302, 2.6868),
    ("Dell XE9685L (2x EPYC 9965)", "Server", 1000, 128794.14, 278.367, 19.7048, 4.0205),
    ("GigaComputing G894-SD1 (2x Xeon 6745P)", "Server", 1000, 128659.56, 83.029, 27.2055, 9.5155),
    ("Lenovo SR780a V3 (2x Xeon 8568Y+)", "Server", 1000, 128689.32, 119.762, 23.8888, 8.5642),
    ("Supermicro AS-4126GS (2x EPYC 9575F)", "Server", 1000, 128701.09, 328.370, 20.2998, 2.2426),
    ("Supermicro SYS-422GS (2x Xeon 6787P)", "Server", 950, 122331.12, 451.497, 25.4460, 1.0760),
    ("NVIDIA B200-SXM-180GBx8_TRT (2x Xeon 8570)", "Interactive", 800, 102902.54, 113.398, 23.3882, 4.8533),
    ("Dell XE9680L (2x Xeon 8562Y+)", "Interactive", 800, 102906.82, 106.877, 23.7149, 3.9495),
    ("GigaComputing G894-SD1 (2x Xeon 6745P)", "Interactive", 800, 102829.07, 39.110, 16.7714, 7.5345),
    ("Supermicro AS-4126GS (2x EPYC 9575F)", "Interactive", 950, 122268.73, 102.416, 21.2748, 4.9604),
)


def _rows() -> dict:
    return {r["id"]: r for r in csv.DictReader(open(_CSV, encoding="utf-8"))}


def _h200_row(row: dict, value: float, qps: int | None) -> dict:
    """A B200 row re-cast as HPE's H200 run of the same scenario (its value and target rate)."""
    load = row["concurrency_or_batch"]
    if qps is not None:
        load = load.split("target_qps=")[0] + f"target_qps={qps}"
    return dict(row, id=row["id"] + "-h200", gpu="H200-SXM-141GB", precision="fp8", tp="1", value=str(value),
                concurrency_or_batch=load)


def _case(row: dict, h200: bool):
    case = case_from_row(row)
    if not h200:
        return case
    rt = case.deployment.runtime
    runtime = rt.with_changes(serving=rt.serving.with_changes(**_H200_LIMITS))
    return replace(case, deployment=replace(case.deployment, runtime=runtime))


def _priced(case, metric: str) -> float:
    return expected_metric(arrival_draws(case.deployment, case.load), metric, scope=case.scope)


def _step_ms(case, decodes: float, prompt_tokens: float, linear: bool = False):
    """The model's GPU step of ``decodes`` decoding requests (contexts half generated) and ``prompt_tokens``
    tokens of whole prompts of the mean length, in ms; with ``linear`` also its linear layers' part (every
    operator but attention and the head: StepModel.linear_s)."""
    isl, osl = case.load.input_len, case.load.output_len
    step = run_serving(case.deployment, replace(case.load, num_requests=1)).step
    prompts = prompt_tokens / isl
    total = 1e3 * step.gpu_s(decodes=round(decodes), context=decodes * (isl + osl / 2.0), prefill_tokens=round(prompt_tokens),
                             pairs=prompts * isl * (isl + 1) / 2.0, sampled=round(decodes + prompts))
    return (total, 1e3 * float(step.linear_s[round(decodes) + round(prompt_tokens)])) if linear else total


def _linear_factor(case, decodes: float, prompt_tokens: float, measured_ms: float) -> str:
    """The step priced at a measured point, and the factor on its linear layers alone that would make it the
    measured step (1 + the missing time / their priced time)."""
    step, linear = _step_ms(case, decodes, prompt_tokens, linear=True)
    return (f"step priced {step:5.1f} ms ({100 * (step / measured_ms - 1):+.0f}%), linear layers {linear:5.1f} ms:"
            f" x{1 + (measured_ms - step) / linear:.2f} on them alone")


def _offline(label: str, case, measured: float) -> str:
    isl, osl = case.load.input_len, case.load.output_len
    per_inst = measured / case.deployment.replicas
    budget = run_serving(case.deployment, replace(case.load, num_requests=1)).step.max_tokens
    finished = budget / (isl + osl)  # requests a budget-full step completes, prompt and output
    decodes = finished * osl
    priced = _priced(case, "output_tokens_per_s")  # the row's scope: the 8-GPU system
    return (f"{label} Offline: measured {measured:9.0f} tok/s, priced {priced:9.0f} ({100 * (priced / measured - 1):+.1f}%);"
            f" budget-full step {1e3 * finished * osl / per_inst:5.1f} ms implied ({decodes:.0f} decodes + {budget - decodes:.0f}"
            f" prompt tokens); " + _linear_factor(case, decodes, budget - decodes, 1e3 * finished * osl / per_inst))


def _online(label: str, scenario: str, cases: tuple, measured: tuple) -> str:
    thr, ttft_s, tpot_s = measured
    case = cases[0]
    per_inst = thr / case.deployment.replicas
    rate = per_inst / case.load.output_len
    decodes, prompt = per_inst * tpot_s, rate * case.load.input_len * tpot_s
    p_thr = _priced(cases[0], "output_tokens_per_s")
    p_ttft, p_tpot = _priced(cases[1], "ttft_mean"), _priced(cases[2], "tpot_mean")
    return (f"{label} {scenario:11s}: {rate:6.1f} req/s an instance; measured TTFT {1e3 * ttft_s:6.1f} TPOT {1e3 * tpot_s:5.1f} ms;"
            f" priced TTFT {1e3 * p_ttft:6.1f} ({100 * (p_ttft / ttft_s - 1):+.0f}%) TPOT {1e3 * p_tpot:5.1f}"
            f" ({100 * (p_tpot / tpot_s - 1):+.0f}%), tok/s {100 * (p_thr / thr - 1):+.1f}%;"
            f" at the measured point ({decodes:.0f} decodes + {prompt:.0f} prompt tokens) "
            + _linear_factor(case, decodes, prompt, 1e3 * tpot_s))


def _submitters(case) -> list[str]:
    """Each B200 run's operating point by Little's law and the model's GPU step there, against its mean TPOT."""
    isl, osl, n = case.load.input_len, case.load.output_len, case.deployment.replicas
    lines = []
    for name, scenario, qps, tok_s, ttft_ms, tpot_ms, min_tpot_ms in _B200_RUNS:
        decodes, prompt = tok_s / n * tpot_ms / 1e3, qps / n * isl * tpot_ms / 1e3
        lines.append(f"  {name:44s} {scenario:11s} {qps:5d} qps: TTFT {ttft_ms:6.1f} ms, TPOT {tpot_ms:5.1f} (min {min_tpot_ms:4.1f},"
                     f" x {osl - 1} = {(osl - 1) * min_tpot_ms:4.0f} ms); {decodes:4.0f} decodes + {prompt:5.0f} prompt tokens: "
                     + _linear_factor(case, decodes, prompt, tpot_ms))
    return lines


def main() -> None:
    rows = _rows()
    print("8 x B200, every v5.1 submitter (same harness and config); the model's step at each run's own point:")
    print("\n".join(_submitters(_case(rows[_B200["server"][2]], False))), flush=True)
    off = rows[_B200["offline"]]
    print(_offline("B200 NVFP4", _case(off, False), float(off["value"])), flush=True)
    print(_offline("H200 FP8  ", _case(_h200_row(off, _H200["offline"][0], None), True), _H200["offline"][0]), flush=True)
    for scenario in ("server", "interactive"):
        ids = _B200[scenario]
        b200 = tuple(_case(rows[i], False) for i in ids)
        meas = (float(rows[ids[0]]["value"]), float(rows[ids[1]]["value"]) * b200[1].unit_to_si,
                float(rows[ids[2]]["value"]) * b200[2].unit_to_si)
        print(_online("B200 NVFP4", scenario, b200, meas), flush=True)
        thr, ttft_ns, tpot_ns, qps = _H200[scenario]
        values = (thr, ttft_ns, tpot_ns)
        h200 = tuple(_case(_h200_row(rows[i], v, qps), True) for i, v in zip(ids, values))
        print(_online("H200 FP8  ", scenario, h200, (thr, 1e-9 * ttft_ns, 1e-9 * tpot_ns)), flush=True)


if __name__ == "__main__":
    main()
