"""The engine versions between the first presets and today's: a row's version picks the preset whose
defaults it ran, and each of these presets behaves where its neighbours do not."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.calibrate.serving_rows import engine_runtime
from autotune.cost.serving_eval import run_serving
from autotune.cost.serving_limits import bench_param_count, engine_limits, trtllm_bench_setting, vllm_device_defaults
from autotune.cost.serving_load import Load, metric_value
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from tests.serving_deployments import deployment as _deployment
from tests.serving_deployments import max_throughput_limits as _limits

_GIB = 2.0**30


@pytest.mark.parametrize(("engine", "version", "preset"), [
    ("tensorrt-llm", "0.18.2", "tensorrt-llm"),
    ("tensorrt-llm", "1.0", "tensorrt-llm-1.0"),
    ("tensorrt-llm", "1.0.0rc4 (PyTorch backend)", "tensorrt-llm-1.0"),
    ("tensorrt-llm", "1.1.0", "tensorrt-llm-1.0"),
    ("vllm", "0.7.3", "vllm-0.6"),  # V0 stays the default engine until 0.8
    ("vllm", "0.8.0", "vllm-0.8"),
    ("vllm", "0.8.5.post1", "vllm-0.8"),
    ("vllm", "0.9", "vllm-0.9"),
    ("vllm", "0.9.2", "vllm-0.9.2"),  # the hybrid KV cache manager (v1/core/single_type_kv_cache_manager.py)
    ("vllm", "0.10.1", "vllm-0.9.2"),
    ("vllm", "0.11.0", "vllm-0.9.2"),
    ("vllm", "0.13.0", "vllm-0.9.2"),  # async scheduling still off by default (config/scheduler.py)
    ("vllm", "0.14.0", "vllm-0.14"),
    ("vllm", "0.19.1", "vllm-0.14"),
    ("vllm", "v0.20.2", "vllm-0.20"),
    ("vllm", "0.33", "vllm"),  # "0.33" is the release "0.33.0" names
    ("sglang", "0.3.6", "sglang-0.3"),
    ("sglang", "0.4.0", "sglang-0.4"),
    ("sglang", "0.4.6.post1", "sglang-0.4"),
    ("sglang", "0.4.7.post1", "sglang-0.4.7"),  # the first chunk by GPU memory (server_args.py)
    ("sglang", "0.4.8", "sglang-0.4.8"),  # its tiers (server_args.py __post_init__), 0.4.8-0.4.10
    ("sglang", "0.4.10.post2", "sglang-0.4.8"),
    ("sglang", "0.5.0rc0", "sglang-0.5.0"),  # the first wheel with MXFP4 (layers/quantization/mxfp4.py), to 0.5.2
    ("sglang", "0.5.0 (main, 2025-08-19)", "sglang-0.5.0"),
    ("sglang", "0.5.3", "sglang-0.5.3"),  # _handle_gpu_memory_settings: graphs and reserve by memory and TP, to 0.5.5
    ("sglang", "0.5.5.post3", "sglang-0.5.3"),
    ("sglang", "0.5.6", "sglang"),
])
def test_a_rows_version_picks_the_preset_of_its_release(engine, version, preset):
    assert engine_runtime(engine, version).name == preset


def test_trtllm_serves_nvfp4_on_blackwell_from_0_17_where_0_14_refuses_it():
    # release-notes.md, Release 0.17.0: 'Added NVFP4 Gemm support for Llama and Mixtral models'; 0.18.x builds on 0.17.0
    with pytest.raises(AutotuneError, match="not nvfp4"):
        _deployment("tensorrt-llm-0.14", model="llama3-70b", cluster="dgx-b200", dtype="nvfp4")
    for name in ("tensorrt-llm-0.17", "tensorrt-llm"):
        assert _deployment(name, model="llama3-70b", cluster="dgx-b200", dtype="nvfp4").dtype == "nvfp4"
    dep = _deployment("tensorrt-llm-1.0", model="llama3-70b", cluster="dgx-b200", dtype="nvfp4")
    limits = _limits(dep, 1000, 1000)
    # trtllm-bench's heuristic counts an NVFP4 weight as half a byte (tuning.py BYTES_PER_ELEM) of the
    # checkpoint's stored elements and, with the ModelOpt checkpoint's FP8 KV cache, one byte a cached element
    model = dep.model
    expected_seqs, _ = trtllm_bench_setting(
        params_b=bench_param_count(model, "nvfp4") / 1e9, num_layers=model.num_layers, num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim, tp=1, device_memory_gib=dep.cluster.device.memory_bytes / _GIB,
        weight_bytes=0.5, kv_bytes=1.0, input_len=1000, output_len=1000)
    assert limits.max_num_seqs == expected_seqs


def test_trtllm_1_0_runs_whole_prompts_in_a_budget_trtllm_bench_raises_to_fit_them():
    # 1.0's trtllm-bench leaves chunked context off and raises max_num_tokens to max ISL + max_batch_size
    # (general.py get_settings); 0.17's chunks a 20,000-token prompt within the heuristic's budget
    old = _limits(_deployment("tensorrt-llm-0.17", model="llama3-70b", cluster="dgx-h200", dtype="fp8"), 20000, 2000)
    new = _limits(_deployment("tensorrt-llm-1.0", model="llama3-70b", cluster="dgx-h200", dtype="fp8"), 20000, 2000)
    assert old.max_num_batched_tokens < 20000
    assert new.max_num_batched_tokens == 20000 + new.max_num_seqs
    assert not load_runtime("tensorrt-llm-1.0").serving.chunked_prefill


def test_trtllm_1_0_decodes_replay_cuda_graphs_and_prompts_run_eagerly():
    # the PyTorch backend: a context step pays the host's issue of every operator, a decode step does not;
    # 0.17's TensorRT engine pays neither (one enqueue per step)
    new, old = load_runtime("tensorrt-llm-1.0").serving, load_runtime("tensorrt-llm-0.17").serving
    assert (new.eager_prefill, old.eager_prefill) == (True, False)
    assert new.decode_cuda_graph_max_batch >= 4096  # trtllm-bench's largest max_batch_size (tuning.py)
    assert (new.kv_block_tokens, old.kv_block_tokens) == (32, 64)


def test_vllm_v1_keeps_decoding_while_prompts_arrive():
    # V0 (0.6) runs a step of prompts alone, its decodes waiting; V1 (0.8) adds the running decodes to
    # every step and chunks prompts into what is left: the slowest inter-token gaps shrink (the
    # schedulers compared alone: without either release's host time, cost/serving_host.py)
    load = Load(kind="rate", num_requests=200, input_len=2048, output_len=256, rate_per_s=8.0)
    no_host = dict(step_host_s=0.0, step_host_s_per_seq=0.0, output_host_s=0.0, output_host_s_per_seq=0.0)
    itl = {}
    for name in ("vllm-0.6", "vllm-0.8"):
        dep = _deployment(name)
        runtime = dep.runtime.with_changes(serving=dep.runtime.serving.with_changes(**no_host))
        trace = run_serving(dataclasses.replace(dep, runtime=runtime), load).trace
        itl[name] = metric_value(trace, "itl_p99", scope="replica", replicas=1, gpus_per_replica=1)
    assert itl["vllm-0.8"] < 0.8 * itl["vllm-0.6"]
    v1 = load_runtime("vllm-0.8").serving
    assert (v1.scheduler, v1.chunked_prefill, v1.scheduler_steps) == ("mixed", True, 1)


def test_vllm_batch_defaults_follow_each_releases_rule():
    h100, a100, b200 = ("H100-SXM5-80GB", 80 * _GIB), ("A100-SXM4-80GB", 80 * _GIB), ("B200", 180 * _GIB)
    # 0.8.0: by name (8192 tokens only on H100/H200), 1024 sequences everywhere
    assert vllm_device_defaults(*h100, "vllm_by_name") == (1024, 8192)
    assert vllm_device_defaults(*b200, "vllm_by_name") == (1024, 2048)
    assert vllm_device_defaults(*a100, "vllm_by_name") == (1024, 2048)
    # 0.9.0-0.11.0: by memory from 70 GiB except A100, no 160 GiB tier; 0.33 adds it
    assert vllm_device_defaults(*b200, "vllm_by_memory") == (1024, 8192)
    assert vllm_device_defaults(*a100, "vllm_by_memory") == (256, 2048)
    assert vllm_device_defaults(*b200, "vllm_device") == (1024, 16384)


def test_vllm_releases_give_a_b200_different_token_budgets():
    budgets = {name: _limits(_deployment(name, cluster="dgx-b200"), 4096, 64).max_num_batched_tokens
               for name in ("vllm-0.8", "vllm-0.9", "vllm")}
    assert budgets == {"vllm-0.8": 2048, "vllm-0.9": 8192, "vllm": 16384}


def test_sglang_0_4_overlaps_its_scheduler_with_the_gpu():
    # 0.3 leaves the GPU idle while the CPU schedules each step (cost/serving_host.py); 0.4's overlap
    # scheduler runs that host work beside the GPU's, so the same run finishes sooner
    load = Load(kind="max_throughput", num_requests=400, input_len=1000, output_len=1000)
    rate = {name: metric_value(run_serving(_deployment(name), load).trace, "output_tokens_per_s", scope="replica",
                               replicas=1, gpus_per_replica=1) for name in ("sglang-0.3", "sglang-0.4")}
    assert load_runtime("sglang-0.3").serving.host_overlap == "none"
    assert load_runtime("sglang-0.4").serving.host_overlap == "all"
    assert rate["sglang-0.4"] > 1.03 * rate["sglang-0.3"]


def test_sglang_0_4_static_share_and_reserve_differ_from_both_neighbours():
    old, new, today = (load_runtime(n).serving for n in ("sglang-0.3", "sglang-0.4", "sglang"))
    assert (old.fraction_for_tp(8), new.fraction_for_tp(8)) == (0.83, 0.81)  # server_args.py 0.3.0 / 0.4.0
    assert new.memory_rule == "static" and today.memory_rule == "sglang_reserve"
    assert not new.ignore_eos_reserves_all and today.ignore_eos_reserves_all
    tp8 = {name: engine_limits(load_runtime(name).serving, resolve_model("llama3-70b"), load_cluster("dgx-h100"), tp=8,
                               weight_dtype="bf16", weight_bytes_per_gpu=70.6e9 * 2 / 8, kv_bytes_per_token_per_gpu=40960.0,
                               input_len=1000, output_len=1000).kv_capacity_tokens
           for name in ("sglang-0.3", "sglang-0.4")}
    assert tp8["sglang-0.4"] < tp8["sglang-0.3"]
