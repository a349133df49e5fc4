"""TensorRT-LLM's attention-DP balancer (cost/serving_adp.py) in the serving simulator."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_adp import AdpBalance, AdpCounters, hold_context, idle_iterations
from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

BAL = AdpBalance(ranks=4, batching_wait_iters=3, timeout_iters=6)


def _holds(counters, iterations, **state):
    return [hold_context(BAL, counters, **state) for _ in range(iterations)]


def test_every_rank_with_a_request_waits_the_batching_iterations_then_runs():
    assert _holds(AdpCounters(), 5, contexts=4, decodes=8, max_seqs=64) == [True, True, True, False, True]


def test_a_rank_without_one_waits_until_the_timeout():
    assert _holds(AdpCounters(), 7, contexts=3, decodes=8, max_seqs=64) == [True] * 5 + [False, True]


def test_nothing_is_held_while_a_rank_has_nothing_to_decode():
    assert _holds(AdpCounters(), 3, contexts=1, decodes=3, max_seqs=64) == [False] * 3
    assert _holds(AdpCounters(), 3, contexts=4, decodes=0, max_seqs=64) == [False] * 3


def test_a_full_rank_counts_as_one_without_room():
    assert _holds(AdpCounters(), 6, contexts=8, decodes=64, max_seqs=64) == [True] * 5 + [False]


def test_idle_iterations_count_toward_the_timeout():
    c = AdpCounters()
    idle_iterations(BAL, c, iterations=4, decodes=8)
    assert c.waiting == 4
    assert _holds(c, 2, contexts=1, decodes=8, max_seqs=64) == [True, False]
    idle_iterations(BAL, c, iterations=4, decodes=2)
    assert c.waiting == 0


def test_negative_settings_are_refused():
    with pytest.raises(AutotuneError, match="adp_timeout_iters"):
        AdpBalance(ranks=4, batching_wait_iters=1, timeout_iters=-1)


def _step():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("mlperf-nvidia-5.1"), tp=1, weight_dtype="fp8")
    return run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=100, output_len=2)).step


def _ttft(balance, step, seed):
    rng = np.random.default_rng(seed)
    n = 300
    req = Requests(arrival_s=np.cumsum(rng.exponential(0.02, n)), input_len=rng.integers(100, 2000, n),
                   output_len=rng.integers(50, 400, n))
    sched = Schedule(scheduler="mixed", chunked_prefill=False, prefill_chunk_tokens=0, max_num_seqs=256,
                     max_num_batched_tokens=8192, kv_capacity_tokens=10**7, kv_block_tokens=32,
                     kv_reservation="grow", adp_balance=balance)
    trace = simulate(req, sched, step)
    return trace.first_token_s - trace.arrival_s


def test_balancing_never_shortens_ttft():
    step = _step()
    for seed in range(3):
        off = _ttft(None, step, seed)
        on = _ttft(AdpBalance(ranks=4, batching_wait_iters=10, timeout_iters=500), step, seed)
        assert on.mean() > off.mean() and np.median(on) >= np.median(off)


def test_stretches_and_single_steps_agree_under_balancing():
    step, bal = _step(), AdpBalance(ranks=4, batching_wait_iters=10, timeout_iters=50)
    rng = np.random.default_rng(7)
    req = Requests(arrival_s=np.cumsum(rng.exponential(0.05, 80)), input_len=rng.integers(100, 900, 80),
                   output_len=rng.integers(20, 200, 80))
    sched = Schedule(scheduler="mixed", chunked_prefill=False, prefill_chunk_tokens=0, max_num_seqs=64,
                     max_num_batched_tokens=8192, kv_capacity_tokens=10**6, kv_block_tokens=32,
                     kv_reservation="grow", adp_balance=bal)
    fast, slow = simulate(req, sched, step), simulate(req, sched, step, fast_forward=False)
    assert np.allclose(fast.first_token_s, slow.first_token_s)


def _deployment_ttft(adp: bool, **degrees) -> np.ndarray:
    runtime = load_runtime("mlperf-nvidia-5.1")
    rt = runtime.with_changes(serving=runtime.serving.with_changes(adp_balance=adp))
    model = "mixtral-8x7b" if degrees else "llama3-8b"
    dep = ServingDeployment(model=resolve_model(model), cluster=load_cluster("dgx-h100"), runtime=rt,
                            weight_dtype="fp8", **(degrees or {"tp": 1}))
    trace = run_serving(dep, Load(kind="rate", num_requests=200, rate_per_s=20.0, input_len=500, output_len=200)).trace
    return trace.first_token_s - trace.arrival_s


def test_the_harness_turns_it_on_and_attention_dp_ranks_wait():
    assert load_runtime("mlperf-nvidia-5.1").serving.adp_balance
    off = _deployment_ttft(False, tp=8, ep=8, attention_dp=True)
    on = _deployment_ttft(True, tp=8, ep=8, attention_dp=True)
    assert on.mean() > off.mean()


def test_one_rank_runs_as_without_it():
    assert np.array_equal(_deployment_ttft(True), _deployment_ttft(False))


def test_a_rows_notes_turn_it_on_with_the_counts_they_quote():
    path = Path(__file__).parent / "data" / "trtllm_pytorch_versions_check.csv"
    row = next(r for r in csv.DictReader(path.open()) if r["id"] == "trt1x-008")
    engine = case_from_row(row).deployment.runtime.serving
    assert (engine.adp_balance, engine.adp_batching_wait_iters, engine.adp_timeout_iters) == (True, 0, 60)
    quiet = dict(row, notes=row["notes"].replace("enable_balance", "")
                 .replace("batching_wait_iters: 0, timeout_iters: 60, ", ""))
    assert not case_from_row(quiet).deployment.runtime.serving.adp_balance
