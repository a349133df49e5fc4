"""Pipeline-parallel instances under TensorRT-LLM: each of the pp micro-batches in flight holds up to the engine's
max_batch_size requests (trtGptModelInflightBatching.cpp's CapacityScheduler(getMaxBatchSize() * mNumMicroBatches)
and per-micro-batch MicroBatchScheduler; the PyTorch backend's get_max_num_sequences = pp_size x batch_size), where
SGLang splits its max_running_requests among them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.calibrate.serving_rows import case_from_row, engine_runtime
from autotune.cost.serving_eval import replica_limits

_ROW = dict(id="pp", source="placeholder", model="Llama-2-70B (MLPerf llama2-70b)", hf_model_id="", arch="",
            params_b="", gpu="H100-SXM-80GB", gpus="8", tp="", pp="", ep="", dp="", precision="",
            engine="mlperf-nvidia", engine_version="MLPerf v5.0 NVIDIA TensorRT-LLM harness; TensorRT 10.8, CUDA 12.8",
            isl="", osl="", concurrency_or_batch="Server scenario, target_qps=107", metric="output_tokens_per_s",
            value="1000", unit="tokens/s (system)", notes="placeholder value")


@pytest.mark.parametrize(("engine", "version", "per_micro_batch"), [
    ("tensorrt-llm", "0.14", True), ("tensorrt-llm", "0.17", True), ("tensorrt-llm", "0.18.2", True),
    ("tensorrt-llm", "0.19", True), ("tensorrt-llm", "1.0", True),
    ("mlperf-nvidia", "4.1", True), ("mlperf-nvidia", "5.0", True), ("mlperf-nvidia", "5.1", True),
    ("sglang", "0.4.0", False), ("sglang", "0.5.23", False), ("vllm", "0.9.0", False)])
def test_which_engines_bound_each_micro_batch(engine, version, per_micro_batch):
    assert engine_runtime(engine, version).serving.pp_seqs_per_micro_batch is per_micro_batch


def test_a_tensorrt_llm_micro_batch_holds_the_systems_batch_and_a_split_engine_its_share():
    case = case_from_row(_ROW)
    dep = case.deployment
    assert (dep.tp, dep.pp) == (1, 2)  # H100_SXM_80GB_PP2x4: 4 instances of 2 pipeline stages
    assert replica_limits(dep, case.load).max_num_seqs == 1024  # gpu_batch_size, each micro-batch
    split = replace(dep, runtime=replace(dep.runtime, serving=replace(dep.runtime.serving, pp_seqs_per_micro_batch=False)))
    assert replica_limits(split, case.load).max_num_seqs == 512
    flat = replace(dep, pp=1)
    assert replica_limits(flat, case.load).max_num_seqs == 1024
