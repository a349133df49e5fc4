"""The shortest step an MLPerf Server / Interactive run shows, measured against simulated (issue 31).

LoadGen's summary prints, beside each mean, the *minimum* over requests of the request's TTFT and of
its TPOT ((latency - TTFT) / (tokens - 1)). The shortest TPOT belongs to a request that ran while the
engine held few others, at the run's start (LoadGen starts an empty engine), so it is close to the
engine's step at a small batch: the fixed part of a step that the mean, read near saturation, only
shows amplified (docs/serving.md, "MLPerf Server latencies"). This script prints, for each MLPerf
``tpot_mean`` row below, the measured minima against the same minima of the simulated run (one replica,
one Poisson draw, seed 0, as scripts/mlperf_server_sensitivity.py runs it), the model's GPU time of
a decode-only step of one request, and the bound the measured minimum sets on the host issue of one
layer of a graph-less TensorRT engine (host_issue_bound_us). A diagnosis, not a fit: nothing here feeds
a prediction.

The measured minima are over every instance of the system (8 for an x8 system), the simulated over one
instance's run, so a measured minimum may sit a little lower for that reason alone.

    PYTHONPATH=. python scripts/mlperf_min_tpot.py tests/data/mlperf_v5_1_nvidia.csv [more.csv ...]
"""

from __future__ import annotations

import sys
from dataclasses import replace

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import serving_eval
from autotune.spec.json_file import read_csv_file

_V41 = "mlcommons/inference_results_v4.1 @a2f5d66d17e8"
_V50 = "ntuhpc/mlperf_inference_results_v5.0 @cf354115915e"
_V51 = "mlcommons/inference_results_v5.1 @965182b03376"
# row id -> (Min First Token latency ns, Min Time to Output Token ns, the summary's repository,
# whether the TensorRT engine ran its steps as CUDA graphs). From closed/NVIDIA/results/<system>/<benchmark>/
# <scenario>/performance/run_1/mlperf_log_summary.txt, the row's own source file. CUDA graphs: "no" for every
# v5.1 and v4.1 row. v5.1: every Llama and Mixtral benchmark runs CoreType.TRTLLM_EXECUTOR
# (code/<benchmark>/tensorrt/__init__.py DEFAULT_CORE_TYPE), whose trtllm.ExecutorConfig
# (code/llmlib/cores/trtllm_executor_core.py) sets no extended_runtime_perf_knob_config, so TensorRT-LLM's
# default ExtendedRuntimePerfKnobConfig applies (cudaGraphMode = false, cpp/include/tensorrt_llm/executor/
# executor.h). The configs' harness_fields.use_graphs (True for Llama 3.1 8B) is read only by the PyTorch-backend
# cores' YAML (code/llmlib/config.py TrtllmExtraYAMLConfig), which raise NotImplementedError for graphs on a
# TensorRT engine. v4.1: the C++ harness declares use_graphs "TODO" (harness_llm/main_llm.cc) and builds its
# GptManager with default TrtGptModelOptionalParams (harness_llm/llm_core.cc @a2f5d66d17e8). v5.0: not read.
MEASURED_MIN_NS: dict[str, tuple[int, int, str, str]] = {
    "mlp41-004": (46375730, 49791668, _V41, "no"),
    "mlp41-008": (35443590, 39156781, _V41, "no"),
    "mlp41-013": (19527194, 10001242, _V41, "no"),
    "mlp41-017": (28333390, 28443030, _V41, "no"),
    "mlp50-004": (19878255, 23776358, _V50, "?"),
    "mlp50-007": (19302978, 18230438, _V50, "?"),
    "mlp50-011": (137526200, 44122203, _V50, "?"),
    "mlp50-015": (14930608, 15091228, _V50, "?"),
    "mlp50-019": (27950758, 33490217, _V50, "?"),
    "mlp50-022": (29489587, 26444817, _V50, "?"),
    "mlp50-030": (22807478, 23747152, _V50, "?"),
    "mlp50-038": (52468952, 42392432, _V50, "?"),
    "mlp50-042": (23604635, 22968120, _V50, "?"),
    "mlp51-004": (21018247, 18591060, _V51, "no"),
    "mlp51-007": (20167275, 17226214, _V51, "no"),
    "mlp51-011": (87752219, 44891461, _V51, "no"),
    "mlp51-014": (65665738, 41306598, _V51, "no"),
    "mlp51-018": (40339914, 3465399, _V51, "no"),
    "mlp51-021": (34430132, 4853330, _V51, "no"),
    "mlp51-029": (23033600, 23148231, _V51, "no"),
    "mlp51-032": (22372307, 17111686, _V51, "no"),
    "mlp51-036": (92084984, 44332692, _V51, "no"),
    "mlp51gb3-008": (134681004, 32998913, _V51, "no"),
}


def _one_request_step_s(case) -> float:
    """The model's GPU seconds of a decode-only step of one request at the load's mean lengths."""
    load = case.load
    step = serving_eval.run_serving(case.deployment, replace(load, num_requests=1)).step
    context = load.input_len + load.output_len / 2.0
    return float(step.gpu_s(decodes=1, context=context, prefill_tokens=0, pairs=0.0, sampled=1))


def host_issue_bound_us(case, min_tpot_ns: int) -> float:
    """The most host issue one decoder layer of the engine could take, in us: the measured shortest TPOT
    over the layers of a pipeline stage. A TensorRT enqueue is asynchronous (the GPU runs behind the
    host), so a step lasts at least its host issue; a graph-less engine issuing h a layer cannot show a
    step shorter than h x its layers. An upper bound from the measurement, not a size."""
    dep = case.deployment
    return min_tpot_ns / 1e3 / (dep.model.num_layers / dep.pp)


def report(row: dict) -> str:
    min_ttft_ns, min_tpot_ns, _, graphs = MEASURED_MIN_NS[row["id"]]
    case = case_from_row(row)
    trace = serving_eval.run_serving(case.deployment, case.load).trace
    tpot, ttft = trace.tpot_s, trace.ttft_s
    one = _one_request_step_s(case)
    return (f"{row['id']:13s} {row['model'].split(' (')[0][:15]:15s} {row['gpu'][:9]:9s} x{row['gpus']:<3s} "
            f"graphs {graphs:3s} | min TPOT {min_tpot_ns / 1e6:6.1f} ms measured, {1e3 * tpot.min():6.1f} simulated | "
            f"min TTFT {min_ttft_ns / 1e6:6.1f} / {1e3 * ttft.min():6.1f} ms | mean TPOT {float(row['value']) / 1e6:6.1f} / "
            f"{1e3 * tpot.mean():6.1f} ms | model decode step of 1 request {1e3 * one:5.1f} ms | "
            f"host issue <= {host_issue_bound_us(case, min_tpot_ns):5.0f} us a layer")


def main(paths: list[str]) -> None:
    rows = [row for path in paths for row in read_csv_file(path, "csv")[1]]
    for row in rows:
        if row["id"] in MEASURED_MIN_NS and row["metric"] == "tpot_mean":
            print(report(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["tests/data/mlperf_v5_1_nvidia.csv"])
