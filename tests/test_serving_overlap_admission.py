"""TensorRT-LLM's overlap scheduler fetches a step's requests while the step before it runs (Schedule.admit_lag)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_adp import AdpBalance
from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

DATA = Path(__file__).parent / "data"


def _step():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("mlperf-nvidia-5.1"), tp=1, weight_dtype="fp8")
    return run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=100, output_len=2)).step


def _sched(lag: bool, balance: AdpBalance | None = None) -> Schedule:
    return Schedule(scheduler="mixed", chunked_prefill=False, prefill_chunk_tokens=0, max_num_seqs=64,
                    max_num_batched_tokens=8192, kv_capacity_tokens=10**6, kv_block_tokens=32,
                    kv_reservation="grow", adp_balance=balance, admit_lag=lag)


def test_a_request_arriving_mid_step_waits_one_more_step():
    step = _step()
    # the first request decodes alone for a long while; the second arrives during its third decode step
    probe = simulate(Requests(arrival_s=np.zeros(1), input_len=np.array([500]), output_len=np.array([400])),
                     _sched(False), step)
    decode_s = (probe.finish_s[0] - probe.first_token_s[0]) / 399
    arrive = probe.first_token_s[0] + 2.5 * decode_s
    req = Requests(arrival_s=np.array([0.0, arrive]), input_len=np.array([500, 500]), output_len=np.array([400, 5]))
    now, lagged = simulate(req, _sched(False), step), simulate(req, _sched(True), step)
    assert lagged.first_token_s[0] == now.first_token_s[0]  # an idle executor takes a request at once
    extra = (lagged.first_token_s[1] - lagged.arrival_s[1]) - (now.first_token_s[1] - now.arrival_s[1])
    assert 0.9 * decode_s < extra < 1.1 * decode_s


def test_stretches_and_single_steps_agree_with_the_lag():
    step = _step()
    rng = np.random.default_rng(11)
    req = Requests(arrival_s=np.cumsum(rng.exponential(0.05, 80)), input_len=rng.integers(100, 900, 80),
                   output_len=rng.integers(20, 200, 80))
    for balance in (None, AdpBalance(ranks=4, batching_wait_iters=3, timeout_iters=9)):
        sched = _sched(True, balance)
        fast, slow = simulate(req, sched, step), simulate(req, sched, step, fast_forward=False)
        assert np.allclose(fast.first_token_s, slow.first_token_s) and np.allclose(fast.finish_s, slow.finish_s)
        off = simulate(req, replace(sched, admit_lag=False), step)
        assert (fast.first_token_s - off.first_token_s).mean() > 0


def test_the_deepseek_r1_harness_systems_run_the_overlap_scheduler():
    rows = [r for r in csv.DictReader((DATA / "mlperf_v5_1_nvidia.csv").open()) if r["id"] in ("mlp51-024", "mlp51-021")]
    engines = {r["id"]: case_from_row(r).deployment.runtime.serving for r in rows}
    assert engines["mlp51-024"].overlap_admission  # deepseek-r1: trtllm-serve's PyTorch executor
    assert not engines["mlp51-021"].overlap_admission  # a TensorRT engine under the C++ executor


def test_the_pytorch_backend_presets_run_it_and_the_tensorrt_engine_ones_do_not():
    for name, on in (("tensorrt-llm-0.19", True), ("tensorrt-llm-1.0", True), ("tensorrt-llm-0.17", False),
                     ("tensorrt-llm-0.14", False), ("mlperf-nvidia-5.1", False)):
        assert load_runtime(name).serving.overlap_admission is on, name
