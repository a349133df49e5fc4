"""How trtllm-bench rows are read: its 'Per User Output Throughput' (each request's output over its whole latency,
serving_load.METRICS output_per_e2e_mean) and the BF16 KV cache of a checkpoint that stores no KV quantization
(serving_flags.bf16_kv_flags)."""

import csv
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_flags import bf16_kv_flags
from autotune.calibrate.serving_phrases import PER_USER_WITH_CONTEXT, per_user_rate
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

BLOGS = Path(__file__).parent / "data" / "trtllm_blogs_check.csv"


def _rows() -> dict:
    with BLOGS.open(newline="") as handle:
        return {r["id"]: r for r in csv.DictReader(handle)}


@pytest.mark.parametrize("metric, unit", [("Per User Output Throughput", "tokens/s/user"),
                                          ("Per User Output Throughput [w/ ctx]", "tps/user")])
def test_trtllm_bench_per_user_throughput_counts_the_whole_request(metric, unit):
    assert per_user_rate(metric, unit) == PER_USER_WITH_CONTEXT
    assert per_user_rate("Per User Output Speed [1/TPOT]", "tps/user") == "tpot_mean"  # its other per-user figure


def test_output_over_the_whole_request_is_below_one_over_tpot():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("tensorrt-llm"), tp=1)
    trace = run_serving(dep, Load(kind="concurrency", num_requests=8, input_len=4096, output_len=64, concurrency=4)).trace
    with_context = metric_value(trace, PER_USER_WITH_CONTEXT)
    assert with_context == pytest.approx(float(np.mean(trace.output_len / (trace.finish_s - trace.arrival_s))))
    assert with_context < 1.0 / metric_value(trace, "tpot_mean")  # the prompt's wait is in it


def test_the_per_user_row_is_read_as_trtllm_bench_does():
    case = case_from_row(_rows()["trtblog-001"])
    assert case.metric == PER_USER_WITH_CONTEXT and not case.inverse


def test_nvidia_r1_fp4_keeps_a_bf16_kv_cache():
    rows = _rows()
    engine = load_runtime("tensorrt-llm-1.0").serving
    assert bf16_kv_flags(engine, "nvidia/DeepSeek-R1-FP4", "") == {"kv_cache_dtype": "auto"}
    assert bf16_kv_flags(engine, "nvidia/DeepSeek-R1-0528-FP4", "") == {}  # stores an FP8 cache
    assert bf16_kv_flags(engine, "nvidia/DeepSeek-R1-FP4", "kv_cache_dtype: fp8") == {}  # a stated FP8 cache wins
    assert bf16_kv_flags(engine, "x/y", "section title 'FP16 KV cache'") == {"kv_cache_dtype": "auto"}
    assert bf16_kv_flags(engine, "deepseek-ai/DeepSeek-R1", "", "fp8") == {"kv_cache_dtype": "auto"}  # block FP8, no KV
    assert bf16_kv_flags(engine, "deepseek-ai/DeepSeek-R1", "", "nvfp4") == {}  # quantized again: not the release
    assert bf16_kv_flags(engine, "nvidia/Llama-3.3-70B-Instruct-FP8", "", "fp8") == {}  # ModelOpt: an FP8 cache
    assert bf16_kv_flags(load_runtime("vllm").serving, "nvidia/DeepSeek-R1-FP4", "") == {}  # 'auto' engines: theirs
    bf16 = case_from_row(rows["trtblog-007"]).deployment
    fp8 = case_from_row(rows["trtblog-003"]).deployment  # R1-0528-FP4, kv_cache_dtype: fp8
    assert bf16.runtime.serving.kv_bytes_per_element("nvfp4", 2) == 2.0
    assert fp8.runtime.serving.kv_bytes_per_element("nvfp4", 2) == 1.0


def test_mlperf_harness_requantized_deepseek_keeps_its_fp8_cache():
    """MLPerf v5.1's DeepSeek-R1 rows name the maker's block-FP8 release but the harness serves its own NVFP4
    quantization with an FP8 cache: a blank precision cell is the engine's default weights, not the release."""
    path = Path(__file__).parent / "data" / "mlperf_v5_1_nvidia.csv"
    rows = {r["id"]: r for r in csv.DictReader(path.open())}
    case = case_from_row(rows["mlp51-022"])
    assert case.deployment.runtime.serving.kv_cache_dtype != "auto"


def test_the_mlperf_harness_states_its_cache_whatever_the_release_named():
    # the harness serves its own ModelOpt export with trtllm_checkpoint_flags kv_cache_dtype 'fp8' (v5.1
    # deepseek-r1 configs), so even an FP8 row naming a maker's block-FP8 release keeps the FP8 cache there
    for preset in ("mlperf-nvidia-5.0", "mlperf-nvidia-5.1"):
        assert bf16_kv_flags(load_runtime(preset).serving, "deepseek-ai/DeepSeek-R1", "", "fp8") == {}
    assert bf16_kv_flags(load_runtime("tensorrt-llm-1.0").serving, "deepseek-ai/DeepSeek-R1", "", "fp8") == \
        {"kv_cache_dtype": "auto"}


def test_deepseek_r1_distillations_are_not_the_block_fp8_release():
    # deepseek-ai/DeepSeek-R1-Distill-* are BF16 Llama / Qwen checkpoints; TensorRT-LLM 0.17's FP8 build quantizes
    # them with an FP8 cache ('the KV cache will automatically be set to FP8 as well'), not the R1 release's none
    engine = load_runtime("tensorrt-llm-0.17").serving
    assert bf16_kv_flags(engine, "deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "--quantization FP8", "fp8") == {}
    assert bf16_kv_flags(engine, "deepseek-ai/DeepSeek-R1-0528", "", "fp8") == {"kv_cache_dtype": "auto"}
