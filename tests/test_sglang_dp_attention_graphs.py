"""SGLang under DP attention: the decode CUDA-graph limit as each release compares it (the busiest rank's decodes
against the per-rank capture list, or the ranks' sum: cost/graph_padding.py replica_graph_max,
calibrate/serving_flags.py dp_graph_flags) and the admission estimate's 0.3 x schedule_conservativeness
(cost/serving_admission.py output_reserve)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_flags import dp_graph_flags
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.graph_padding import replica_graph_max
from autotune.cost.serving_admission import output_reserve
from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("preset, release, per_rank", [
    ("sglang-0.4", "0.4.0", True), ("sglang-0.4", "0.4.4", True), ("sglang-0.4", "0.4.5", False),
    ("sglang-0.4", "0.4.6", False), ("sglang-0.4.7", "0.4.7", False), ("sglang-0.4.8", "0.4.9", False),
    ("sglang-0.4.8", "0.4.10", True), ("sglang-0.4.8", "0.5.0 (main, 2025-08-19)", True), ("sglang", "0.5.12", True),
])
def test_each_release_compares_the_graph_limit_as_its_cuda_graph_runner(preset, release, per_rank):
    engine = load_runtime(preset).serving
    assert engine.with_changes(**dp_graph_flags(engine, release)).decode_graph_per_dp_rank is per_rank


def test_no_change_for_other_engines_or_an_unnamed_release():
    assert dp_graph_flags(load_runtime("vllm").serving, "0.5.0") == {}
    assert dp_graph_flags(load_runtime("sglang-0.4.8").serving, "main") == {}


def test_a_per_rank_limit_holds_ranks_times_it_over_the_replica():
    engine = load_runtime("sglang").serving.with_changes(decode_cuda_graph_max_batch=640, decode_graph_max_by_memory=())
    assert replica_graph_max(engine, 180e9, 4) == 2560
    assert replica_graph_max(engine, 180e9, 1) == 640
    summed = engine.with_changes(decode_graph_per_dp_rank=False)
    assert replica_graph_max(summed, 180e9, 4) == 640
    # TensorRT-LLM's PyTorch executor holds its limit per rank too; NVIDIA's MLPerf systems state theirs for the
    # replica (8 ranks x the largest configured size: serving_systems.toml)
    assert replica_graph_max(load_runtime("tensorrt-llm-1.0").serving, 180e9, 8) == 8 * 4096
    assert replica_graph_max(load_runtime("mlperf-nvidia-5.1").serving, 180e9, 8) == load_runtime(
        "mlperf-nvidia-5.1").serving.decode_cuda_graph_max_batch


def test_gpt_oss_dp4_decodes_640_a_rank_in_graphs():
    # sgl-project/sglang#9359: --dp 4 --enable-dp-attention --cuda-graph-max-bs 640 --max-running-requests 2560 on
    # 4 B200; 2,560 decodes are 640 a rank: graph replays, each step shorter than the eager issue of its operators
    row = next(r for r in csv.DictReader(open(DATA / "sglang_newer_check.csv", encoding="utf-8")) if r["id"] == "sglnew-031")
    case = case_from_row(row)
    load = replace(case.load, num_requests=2560)
    graphs = run_serving(case.deployment, load).trace
    engine = case.deployment.runtime.serving.with_changes(decode_graph_per_dp_rank=False)
    eager = run_serving(replace(case.deployment, runtime=case.deployment.runtime.with_changes(serving=engine)), load).trace
    assert graphs.mean_running == eager.mean_running == 2560
    assert graphs.duration_s < 0.8 * eager.duration_s


def test_dp_attention_scales_the_new_token_ratio_by_0_3():
    engine = load_runtime("sglang-0.4.8").serving
    plain, dp = output_reserve(engine), output_reserve(engine, attention_dp=True)
    assert (dp.init_ratio, dp.min_ratio, dp.decay_per_step) == pytest.approx(
        (0.3 * plain.init_ratio, 0.3 * plain.min_ratio, 0.3 * plain.decay_per_step))
    assert dp.init_ratio == pytest.approx(0.21) and dp.min_ratio == pytest.approx(0.0294)


def test_the_smaller_estimate_admits_more_and_retracts_more():
    # 60 requests of 100 + 200 tokens on a 10,000-token pool (18,000 at full length): SGLang 0.4's rule expects 0.7
    # of each running output and over-commits; at DP attention's 0.21 it admits more and recomputes more prompts
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("sglang-0.4.8"), tp=1, weight_dtype="bf16")
    step = run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=100, output_len=2)).step
    load = Requests(arrival_s=np.zeros(60), input_len=np.full(60, 100), output_len=np.full(60, 200))

    def prefilled(reserve) -> int:
        schedule = Schedule(scheduler="prefill_first", chunked_prefill=True, prefill_chunk_tokens=8192, max_num_seqs=1000,
                            max_num_batched_tokens=16384, kv_capacity_tokens=10_000, kv_block_tokens=1,
                            kv_reservation="grow", reserve=reserve)
        return simulate(load, schedule, step).prefilled_tokens

    engine = dep.runtime.serving
    assert 6000 < prefilled(output_reserve(engine)) < prefilled(output_reserve(engine, attention_dp=True))
