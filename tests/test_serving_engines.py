"""Serving engines as runtimes: presets with a source for every value, validation, no training."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from importlib import resources

import pytest

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.cost.evaluate import evaluate_plan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import Runtime, load_runtime, runtime_from_dict, runtime_names
from autotune.spec.serving_engine import ServingEngine
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

SERVING = [n for n in runtime_names() if load_runtime(n).serving is not None]


def test_the_engines_and_their_dated_versions_are_presets():
    assert {"vllm", "vllm-0.6", "sglang", "sglang-0.3", "tensorrt-llm", "tensorrt-llm-0.17", "tensorrt-llm-0.14",
            "mlperf-nvidia-4.1"} <= set(SERVING)
    assert load_runtime("megatron").serving is None


@pytest.mark.parametrize("name", SERVING)
def test_every_serving_value_names_its_source(name):
    runtime = load_runtime(name)
    for f in fields(ServingEngine):
        source = runtime.source_of(f"serving.{f.name}")
        default = f.default
        if f.name in ("engine", "version") or getattr(runtime.serving, f.name) != default:
            assert len(source) > 20, f"{name}: serving.{f.name} = {getattr(runtime.serving, f.name)!r} has no source"
    data = tomllib.loads(resources.files("autotune.data").joinpath("runtimes", f"{name}.toml").read_text())
    for key, entry in data.get("serving", {}).items():
        assert set(entry) == {"value", "source"}, (name, key)


def test_versions_differ_where_behaviour_changed():
    old, new = load_runtime("vllm-0.6").serving, load_runtime("vllm").serving
    assert (old.scheduler, old.chunked_prefill, old.max_num_seqs) == ("prefill_first", False, 256)
    assert (new.scheduler, new.chunked_prefill, new.max_num_seqs) == ("mixed", True, 1024)
    assert load_runtime("sglang-0.3").serving.fraction_for_tp(4) == 0.85  # server_args.py 0.3.0
    assert load_runtime("sglang-0.3").serving.fraction_for_tp(1) == 0.88
    trt = load_runtime("tensorrt-llm-0.17").serving
    assert trt.kv_bytes_per_element("fp8", 2) == 1.0 and trt.kv_bytes_per_element("bf16", 2) == 2.0
    assert load_runtime("tensorrt-llm-0.14").serving.kv_cache_dtype == "auto"  # its own value over its base's


def test_the_mlperf_harness_pauses_requests_where_trtllm_bench_reserves_their_outputs():
    # NVIDIA's v4.1 harness runs TensorRT-LLM's max_util policy without chunked context (main_llm.cc,
    # llm_core.cc); trtllm-bench's default is guaranteed_no_evict. 400 requests of 500 + 3,000 tokens
    # outgrow an H100's cache: the harness starts them on their prompts' blocks and recomputes the ones it
    # pauses; no-evict admits only what fits whole and never prefills a prompt twice
    harness = load_runtime("mlperf-nvidia-4.1").serving
    assert (harness.kv_reservation, harness.chunked_prefill) == ("grow", False)
    load = Load(kind="max_throughput", num_requests=400, input_len=500, output_len=3000)
    prefilled = {}
    for name in ("mlperf-nvidia-4.1", "tensorrt-llm-0.17"):
        dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                                runtime=load_runtime(name), tp=1, weight_dtype="fp8")
        prefilled[name] = run_serving(dep, load).trace.prefilled_tokens
    assert prefilled["tensorrt-llm-0.17"] == 400 * 500 < prefilled["mlperf-nvidia-4.1"]


def test_bad_serving_values_are_one_line_errors():
    with pytest.raises(AutotuneError, match="serving.scheduler"):
        ServingEngine(engine="vllm", version="x", scheduler="fifo")
    with pytest.raises(AutotuneError, match="serving.memory_fraction"):
        ServingEngine(engine="vllm", version="x", memory_fraction=1.5)
    with pytest.raises(AutotuneError, match="serving.default_weight_dtype"):
        ServingEngine(engine="vllm", version="x", weight_dtypes=("bf16",), default_weight_dtype="fp8")
    with pytest.raises(AutotuneError, match="runtime.serving"):
        Runtime(name="x", serving={"engine": "vllm", "version": "1", "warp_speed": 9})


def test_a_serving_runtime_round_trips_through_its_dict():
    runtime = load_runtime("sglang-0.3")
    again = runtime_from_dict(runtime.to_dict())
    assert again == runtime and again.serving.memory_fraction_by_tp == runtime.serving.memory_fraction_by_tp


def test_training_refuses_a_serving_engine_and_pricing_ignores_serving_fields():
    model, cluster = resolve_model("small"), load_cluster("dgx-h100")
    workload = TrainingWorkload(global_batch=8, seq_len=512)
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, micro_batch=1, global_batch=8)
    with pytest.raises(AutotuneError, match="serving engine"):
        evaluate_plan(model, workload, cluster, plan, runtime=load_runtime("vllm"))
    neutral = Runtime(name="neutral")
    with_serving = neutral.with_changes(serving=load_runtime("vllm").serving)
    inference = InferenceWorkload(batch=4, prompt_len=128, output_len=8, kind="serve")
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, micro_batch=4, global_batch=4)
    a = evaluate_plan(model, inference, cluster, plan, runtime=neutral)
    b = evaluate_plan(model, inference, cluster, plan, runtime=with_serving)
    assert a.step_time_s == b.step_time_s and a.peak_memory_bytes_per_gpu == b.peak_memory_bytes_per_gpu


def test_fp8_inference_reads_one_byte_weights_and_casts_none():
    model, cluster = resolve_model("llama3-8b"), load_cluster("dgx-h100")
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, micro_batch=1, global_batch=1)
    runtime = Runtime(name="neutral")
    est = {d: evaluate_plan(model, InferenceWorkload(batch=1, prompt_len=512, output_len=64, dtype=d), cluster, plan,
                            runtime=runtime) for d in ("bf16", "fp8")}
    # weights held: 1 byte per GEMM parameter instead of 2
    ratio = est["fp8"].memory_breakdown["weights_bytes"] / est["bf16"].memory_breakdown["weights_bytes"]
    assert 0.49 < ratio < 0.52
    # one-sequence decode reads the weights each step: FP8 halves that part; the FP8 GEMM fit's 21 us
    # intercept (torch._scaled_mm on an H100, devices/h100-sxm.toml) and attention stay
    assert 0.6 < est["fp8"].step_time_s / est["bf16"].step_time_s < 0.85
