"""vLLM V1's API server: intake and streaming on one event loop (autotune/cost/serving_loop.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.cost.serving_loop import LoopClock, SharedLoop, shared_loop_of
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

BENCH = Path(__file__).parent / "data" / "vllm_0_11_frontend_bench.toml"
LOOP = SharedLoop(intake_s=0.002, intake_before_send=0.75, stream_s_per_seq=1e-4)


def test_a_burst_delays_the_running_streams_tokens_by_its_intake():
    # 8 streams decoding; a step ends 1 ms after 100 requests arrived at once: its tokens wait for their intake
    quiet = LoopClock(loop=LOOP, sent_s=np.zeros(0))
    busy = LoopClock(loop=LOOP, sent_s=np.full(100, 1.0))
    alone = quiet.emit(np.array([1.001]), 8)[0]
    behind = busy.emit(np.array([1.001]), 8)[0]
    assert alone == pytest.approx(1.001 + 0.5 * 8 * 1e-4)
    assert behind == pytest.approx(1.0 + 100 * 0.002 + 0.5 * 8 * 1e-4)
    # a step that ended before the burst is not held up by it
    assert LoopClock(loop=LOOP, sent_s=np.full(100, 1.0)).emit(np.array([0.999]), 8)[0] == pytest.approx(alone - 0.002)


def test_more_streams_make_the_loop_longer_a_step():
    ends = np.arange(1, 11) * 0.010  # a step every 10 ms
    few = LoopClock(loop=LOOP, sent_s=np.zeros(0)).emit(ends, 50)  # 5 ms of streaming a step: it keeps up
    many = LoopClock(loop=LOOP, sent_s=np.zeros(0)).emit(ends, 300)  # 30 ms a step: the loop sets the pace
    assert np.allclose(np.diff(few), 0.010)
    assert np.allclose(np.diff(many), 0.030)


def test_a_burst_reaches_the_engine_after_every_handler_reached_its_first_suspension():
    clock = LoopClock(loop=LOOP, sent_s=np.zeros(4))
    # 4 x 1.5 ms before anyone is sent, then each request's last 0.5 ms sends it
    assert np.allclose(clock.intake_ends(), 4 * 0.0015 + 0.0005 * np.arange(1, 5))
    # requests apart from each other are taken one at a time
    apart = LoopClock(loop=LOOP, sent_s=np.array([0.0, 1.0])).intake_ends()
    assert np.allclose(apart, [0.002, 1.002])


def _run(load: Load, **changes):
    rt = load_runtime("vllm-0.9.2")
    rt = rt.with_changes(serving=rt.serving.with_changes(**changes)) if changes else rt
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"), runtime=rt, tp=1,
                            weight_dtype="bf16")
    return run_serving(dep, load).trace


def test_a_bursts_first_tokens_wait_for_its_intake_on_the_shared_loop():
    burst = Load(kind="max_throughput", num_requests=500, input_len=200, output_len=100)
    shared, without = _run(burst), _run(burst, frontend_intake_s=0.0)
    intake = load_runtime("vllm-0.9.2").serving.frontend_intake_s
    # every first token comes after the burst's handlers ran to their suspension (500 x 0.673 x 1.36 ms)
    assert float(shared.first_token_s.min()) >= 500 * 0.673 * intake
    assert metric_value(shared, "ttft_mean") > metric_value(without, "ttft_mean") + 0.5 * 500 * intake
    assert np.all(shared.finish_s >= shared.first_token_s)


def test_a_closed_loop_pays_one_intake_on_its_ttft():
    few = Load(kind="concurrency", num_requests=16, concurrency=2, input_len=200, output_len=50)
    shared, without = _run(few), _run(few, frontend_intake_s=0.0)
    intake = load_runtime("vllm-0.9.2").serving.frontend_intake_s
    assert metric_value(shared, "ttft_mean") == pytest.approx(metric_value(without, "ttft_mean") + intake, rel=0.02)


def test_the_v1_presets_take_the_measured_intake_and_v0_has_none():
    bench = tomllib.loads(BENCH.read_text())["intake"]
    loop = shared_loop_of(load_runtime("vllm-0.9.2").serving)
    assert loop.intake_s == min(bench["burst_1000_cpu_s"]["value"])
    assert loop.intake_before_send in bench["burst_before_first_send"]["value"][0]
    assert shared_loop_of(load_runtime("vllm-0.6").serving) is None
    assert shared_loop_of(load_runtime("sglang").serving) is None


def test_a_share_outside_zero_to_one_is_a_one_line_error():
    with pytest.raises(AutotuneError, match="frontend"):
        SharedLoop(intake_s=0.001, intake_before_send=1.5, stream_s_per_seq=0.0)


def test_a_loaded_runs_passes_settle(monkeypatch):
    # Poisson arrivals near the engine's capacity: the intake ends and the engine's arrivals depend on each
    # other; more passes past the settled point move the TTFT little (undamped passes swing it by 5-10%)
    import autotune.cost.serving_loop as serving_loop

    load = Load(kind="rate", num_requests=1000, input_len=200, output_len=200, rate_per_s=80.0)
    settled = metric_value(_run(load), "ttft_mean")
    monkeypatch.setattr(serving_loop, "LOOP_SETTLED_S", 0.0)
    for passes in (16, 20):
        monkeypatch.setattr(serving_loop, "LOOP_PASSES", passes)
        assert metric_value(_run(load), "ttft_mean") == pytest.approx(settled, rel=0.025)
