"""The serving model: step costs, engine limits, the scheduler simulation and the loads' metrics."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.serving_admission import output_reserve
from autotune.cost.serving_eval import ARRIVAL_DRAWS, ServingDeployment, arrival_draws, expected_metric, run_serving
from autotune.cost.serving_lengths import uniform_lengths
from autotune.cost.serving_limits import sglang_max_running, trtllm_bench_setting, vllm_device_defaults
from autotune.cost.serving_load import Load, metric_value, mlperf_server_max_rate, requests_for, weighted_percentile
from autotune.cost.serving_sim import Schedule, simulate
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def _deployment(runtime="vllm-0.6", model="llama3-8b", cluster="dgx-h100", tp=1, dtype="bf16", **kw):
    return ServingDeployment(model=resolve_model(model), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                             tp=tp, weight_dtype=dtype, **kw)


def test_a_decode_step_reads_the_weights_once_whatever_the_batch():
    model, cluster = resolve_model("llama3-70b"), load_cluster("dgx-h100")
    step = step_model(model, cluster, ReplicaShape(tp=4), weight_dtype="bf16", kv_bytes=2, max_tokens=256, max_sampled=256)
    memory = cluster.device.memory_regression("stream")
    floor = step.weight_bytes_per_gpu * memory.seconds_per_unit / cluster.device.kernel_efficiency
    one = step.gpu_s(decodes=1, context=1000, prefill_tokens=0, pairs=0, sampled=1)
    assert floor < one < 1.4 * floor  # weights dominate; launches, all-reduces and the KV read add the rest
    # 64 requests cost far less than 64 single ones: the weights are read once a step
    assert step.gpu_s(decodes=64, context=64_000, prefill_tokens=0, pairs=0, sampled=64) < 1.5 * one
    fp8 = step_model(model, cluster, ReplicaShape(tp=4), weight_dtype="fp8", kv_bytes=1, max_tokens=256, max_sampled=256)
    assert 0.49 < fp8.weight_bytes_per_gpu / step.weight_bytes_per_gpu < 0.52
    assert fp8.kv_bytes_per_token_per_gpu == step.kv_bytes_per_token_per_gpu / 2


def test_prompt_attention_grows_with_the_context_it_attends():
    step = step_model(resolve_model("llama3-8b"), load_cluster("dgx-h100"), ReplicaShape(tp=1), weight_dtype="bf16",
                      kv_bytes=2, max_tokens=8192, max_sampled=8)
    short = step.gpu_s(decodes=0, context=0, prefill_tokens=4096, pairs=4096 * 4097 / 2, sampled=1)
    late_chunk = step.gpu_s(decodes=0, context=0, prefill_tokens=4096, pairs=4096 * (8192 + 4097 / 2), sampled=1)
    assert late_chunk > short * 1.2
    with pytest.raises(AutotuneError, match="max_num_batched_tokens"):
        step.gpu_s(decodes=0, context=0, prefill_tokens=9000, pairs=1.0, sampled=1)


def test_trtllm_bench_build_heuristic_by_hand():
    # Llama 3.1 70B FP8 on one H100 (80 GiB), ISL 128 / OSL 2048, tuning.py with 0.95 of the rest for KV:
    # (79.6 - 70.6) x 0.95 GiB / (2 x 80 x 8 x 128 B per token) / 2176 tokens = 25.8 requests -> 64 / 2048
    assert trtllm_bench_setting(params_b=70.6, num_layers=80, num_kv_heads=8, head_dim=128, tp=1,
                                device_memory_gib=79.6, weight_bytes=1, kv_bytes=1, input_len=128,
                                output_len=2048) == (64, 2048)
    # at TP 4 the KV cache holds ~ 1000 requests: rounded up to a multiple of 256 past 1024, tokens x (1 + 128/2048)
    bs, tokens = trtllm_bench_setting(params_b=70.6, num_layers=80, num_kv_heads=8, head_dim=128, tp=4,
                                      device_memory_gib=79.6, weight_bytes=1, kv_bytes=1, input_len=2048, output_len=128)
    assert bs % 128 == 0 and tokens % 1024 == 0 and tokens >= bs * (1 + 2048 / 128) - 1024


def test_sglang_caps_running_requests_by_its_pool():
    assert sglang_max_running(10_000, 8192) == 2047  # the pool's floor of 2048 slots, one kept free
    assert sglang_max_running(1_000, 8192) == 500  # half the KV tokens
    assert sglang_max_running(8_000_000, 32768) == 5119  # the pool's ceiling


def test_vllm_defaults_follow_the_gpu():
    gib = 2.0**30
    assert vllm_device_defaults("H100-SXM5-80GB", 80 * gib) == (1024, 8192)
    assert vllm_device_defaults("A100-SXM4-80GB", 80 * gib) == (256, 2048)
    assert vllm_device_defaults("B200", 180 * gib) == (1024, 16384)


def test_vllm_06_token_budget_follows_the_launched_max_model_len():
    """vLLM 0.6 without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048) (config.py
    SchedulerConfig), max_model_len being --max-model-len where the launch gives it, else the model's."""
    from autotune.cost.serving_limits import engine_limits

    dep = _deployment(model="llama3-70b", tp=4)
    engine, model = dep.runtime.serving, dep.model
    probe = run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=8, output_len=2)).step

    def budget(serving):
        return engine_limits(serving, model, dep.cluster, tp=4, weight_dtype="bf16",
                             weight_bytes_per_gpu=probe.weight_bytes_per_gpu,
                             kv_bytes_per_token_per_gpu=probe.kv_bytes_per_token_per_gpu,
                             input_len=215, output_len=194).max_num_batched_tokens

    assert budget(engine) == model.max_seq_len == 8192
    assert budget(engine.with_changes(max_model_len=4096)) == 4096
    assert budget(engine.with_changes(max_model_len=1024)) == 2048


def _schedule(run, **changes):
    engine, limits = run.deployment.runtime.serving, run.limits
    values = dict(scheduler=engine.scheduler, chunked_prefill=engine.chunked_prefill,
                  prefill_chunk_tokens=engine.prefill_chunk_tokens,
                  max_num_seqs=min(limits.max_num_seqs, limits.kv_capacity_tokens // run.load.input_len),
                  max_num_batched_tokens=limits.max_num_batched_tokens, kv_capacity_tokens=limits.kv_capacity_tokens,
                  kv_block_tokens=engine.kv_block_tokens, kv_reservation=engine.kv_reservation,
                  scheduler_steps=engine.scheduler_steps, step_host_s=engine.step_host_s,
                  step_host_share=engine.step_host_share, step_host_s_per_seq=engine.step_host_s_per_seq,
                  output_host_s=engine.output_host_s, output_host_s_per_seq=engine.output_host_s_per_seq,
                  host_overlap=engine.host_overlap, reserve=output_reserve(engine))
    values.update(changes)
    return Schedule(**values)


CASES = [
    ("vllm-0.6", Load(kind="rate", num_requests=200, input_len=215, output_len=120, rate_per_s=8), dict(scheduler_steps=10)),
    ("vllm-0.6", Load(kind="max_throughput", num_requests=250, input_len=215, output_len=150), dict(kv_capacity_tokens=16000)),
    ("tensorrt-llm-0.17", Load(kind="concurrency", num_requests=200, input_len=500, output_len=200, concurrency=48), {}),
    # vLLM 0.6 full at 64 sequences, 10 steps a call: finished requests hold their slots one scheduling (late_finish)
    ("vllm-0.6", Load(kind="max_throughput", num_requests=300, input_len=215, output_len=151,
                      lengths=uniform_lengths(215, 151, 0.8, source="test")), dict(scheduler_steps=10, max_num_seqs=64)),
    ("vllm", Load(kind="rate", num_requests=200, input_len=1000, output_len=150, rate_per_s=12), dict(kv_capacity_tokens=50000)),
    ("sglang-0.3", Load(kind="max_throughput", num_requests=150, input_len=3000, output_len=60), dict(kv_capacity_tokens=40000)),
    # SGLang's reserve admission: requests enter mid-stretch as the ratio decays, and some are retracted
    ("sglang-0.3", Load(kind="max_throughput", num_requests=300, input_len=200, output_len=600), dict(kv_capacity_tokens=30000)),
    ("sglang", Load(kind="rate", num_requests=200, input_len=300, output_len=400, rate_per_s=20), dict(kv_capacity_tokens=30000)),
    # SGLang's --scheduler-recv-interval: new requests enter only at polls, every 10 (7) decode steps
    ("sglang", Load(kind="concurrency", num_requests=120, input_len=900, output_len=300, concurrency=12,
                    lengths=uniform_lengths(900, 300, 0.8, source="test")), dict(recv_interval=10)),
    ("sglang", Load(kind="rate", num_requests=200, input_len=300, output_len=400, rate_per_s=20), dict(recv_interval=7)),
]


@pytest.mark.parametrize("runtime,load,changes", CASES)
def test_decode_stretches_equal_the_step_by_step_reference(runtime, load, changes):
    run = run_serving(_deployment(runtime, dtype="fp8" if runtime.startswith("tensorrt") else "bf16"), load)
    schedule = _schedule(run, **changes)
    fast = simulate(requests_for(load), schedule, run.step)
    slow = simulate(requests_for(load), schedule, run.step, fast_forward=False)
    assert fast.steps == slow.steps
    for metric in ("output_tokens_per_s", "ttft_mean", "ttft_median", "tpot_mean", "itl_mean", "itl_median", "itl_p99"):
        assert metric_value(fast, metric) == pytest.approx(metric_value(slow, metric), rel=1e-9), metric


def test_every_request_gets_all_its_tokens_in_order():
    run = run_serving(_deployment(), Load(kind="rate", num_requests=300, input_len=300, output_len=80, rate_per_s=10))
    trace = run.trace
    assert np.all(trace.first_token_s >= trace.arrival_s) and np.all(trace.finish_s > trace.first_token_s)
    # every token but each request's first is one streamed gap
    assert trace.itl_weight.sum() == pytest.approx(float((trace.output_len - 1).sum()))


def test_throughput_rises_with_concurrency_then_the_engine_limits_it():
    dep = _deployment()
    rates = [metric_value(run_serving(dep, Load(kind="concurrency", num_requests=600, input_len=200, output_len=200,
                                                concurrency=c)).trace, "output_tokens_per_s") for c in (1, 8, 64)]
    assert rates[0] < rates[1] < rates[2]
    best = metric_value(run_serving(dep, Load(kind="max_throughput", num_requests=600, input_len=200,
                                              output_len=200)).trace, "output_tokens_per_s")
    assert best >= rates[2] * 0.95


def test_below_capacity_a_rate_is_served_past_it_the_queue_grows():
    dep = _deployment()
    light = run_serving(dep, Load(kind="rate", num_requests=400, input_len=200, output_len=100, rate_per_s=2)).trace
    # Little's law in steady state: requests in the system = rate x time in the system
    assert light.mean_running == pytest.approx(2 * float(np.mean(light.finish_s - light.first_token_s)), rel=0.25)
    capacity = metric_value(run_serving(dep, Load(kind="max_throughput", num_requests=400, input_len=200,
                                                  output_len=100)).trace, "requests_per_s")
    over = [run_serving(dep, Load(kind="rate", num_requests=n, input_len=200, output_len=100,
                                  rate_per_s=4 * capacity)).trace for n in (400, 800)]
    # saturated: the queue, and with it the mean wait, grows with the length of the run
    assert metric_value(over[1], "ttft_mean") > 1.6 * metric_value(over[0], "ttft_mean")
    assert metric_value(over[1], "requests_per_s") == pytest.approx(capacity, rel=0.15)


def test_a_rate_is_priced_as_the_mean_over_independent_arrival_draws():
    dep = _deployment()
    load = Load(kind="rate", num_requests=120, input_len=200, output_len=60, rate_per_s=6, seed=3)
    draws = arrival_draws(dep, load)
    assert len(draws) == ARRIVAL_DRAWS and [r.load.seed for r in draws] == list(range(3, 3 + ARRIVAL_DRAWS))
    ttfts = [metric_value(r.trace, "ttft_mean") for r in draws]
    assert len(set(ttfts)) > 1  # the draws differ: each is one benchmark run's arrivals
    assert expected_metric(draws, "ttft_mean") == pytest.approx(float(np.mean(ttfts)))
    per_system = expected_metric(draws, "output_tokens_per_s", scope="system")
    assert per_system == pytest.approx(float(np.mean([metric_value(r.trace, "output_tokens_per_s") for r in draws])))
    # arrivals all at once are not random: one run
    assert len(arrival_draws(dep, Load(kind="max_throughput", num_requests=50, input_len=200, output_len=60))) == 1


def test_mlperf_server_rate_is_the_highest_that_meets_the_p99_limits():
    dep = _deployment("mlperf-nvidia-4.1", "llama2-70b", "dgx-h200", tp=1, dtype="fp8")

    def run(rate):
        return run_serving(dep, Load(kind="rate", num_requests=400, input_len=300, output_len=290, rate_per_s=rate)).trace

    loose = mlperf_server_max_rate(run, ttft_p99_s=2.0, tpot_p99_s=0.2, low_per_s=1.0, high_per_s=40.0, tolerance=0.05)
    strict = mlperf_server_max_rate(run, ttft_p99_s=0.45, tpot_p99_s=0.04, low_per_s=0.5, high_per_s=40.0, tolerance=0.05)
    assert 0 < strict < loose
    assert metric_value(run(loose), "tpot_p99") <= 0.2


def test_scopes_and_statistics():
    trace = run_serving(_deployment(), Load(kind="max_throughput", num_requests=100, input_len=100, output_len=50)).trace
    replica = metric_value(trace, "output_tokens_per_s")
    assert metric_value(trace, "output_tokens_per_s", scope="system", replicas=8) == pytest.approx(8 * replica)
    assert metric_value(trace, "output_tokens_per_s", scope="gpu", gpus_per_replica=2) == pytest.approx(replica / 2)
    assert metric_value(trace, "total_tokens_per_s") == pytest.approx(replica * 3)
    values, weights = np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0, 1.0])
    assert weighted_percentile(values, weights, 50) == np.percentile([1, 1, 2, 3], 50)
    with pytest.raises(AutotuneError, match="metric"):
        metric_value(trace, "joules")


def test_a_deployment_states_what_it_cannot_run():
    with pytest.raises(AutotuneError, match="serving engine"):
        _deployment("megatron")
    with pytest.raises(AutotuneError, match="precision"):
        _deployment("sglang-0.3", dtype="nvfp4")
    with pytest.raises(AutotuneError, match="attention_dp"):
        _deployment("vllm-0.6", model="mixtral-8x7b", tp=2, attention_dp=True)
    with pytest.raises(AutotuneError, match="no KV cache"):  # 70B in BF16 does not fit one H100
        run_serving(_deployment("vllm-0.6", model="llama3-70b"), Load(kind="max_throughput", num_requests=4,
                                                                       input_len=10, output_len=10))
