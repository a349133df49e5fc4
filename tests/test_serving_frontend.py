"""The host path outside the engine (cost/serving_frontend.py): client, prompt encode, streamed decode."""

from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_frontend import FrontEnd, client_trace, engine_requests, frontend_of
from autotune.cost.serving_load import Load, metric_value
from autotune.cost.serving_run import Requests, Trace
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import serving_engine_from_dict

FRONT = FrontEnd(client_request_s=1e-3, prompt_encode_s=((100, 2e-4), (1000, 4e-3)), stream_token_s=1e-5)


def _requests(arrival, concurrency=0):
    n = len(arrival)
    return Requests(arrival_s=np.asarray(arrival, dtype=float), input_len=np.full(n, 100), output_len=np.full(n, 4),
                    concurrency=concurrency)


def test_encode_interpolates_the_measured_points_and_keeps_the_last_rate_beyond():
    assert FRONT.encode_s(np.array([50, 100, 550, 1000])) == pytest.approx([1e-4, 2e-4, 2.1e-3, 4e-3])
    assert FRONT.encode_s(np.array([2000]))[0] == pytest.approx(8e-3)


def test_prompts_are_encoded_one_at_a_time():
    at_once = engine_requests(_requests([0.0, 0.0, 0.0]), FRONT)
    assert at_once.arrival_s == pytest.approx([1.2e-3, 1.4e-3, 1.6e-3])  # the second waits for the first
    apart = engine_requests(_requests([0.0, 1.0]), FRONT)
    assert apart.arrival_s == pytest.approx([1.2e-3, 1.0012])  # no wait when the instance is free
    closed = _requests([0.0, 0.0], concurrency=2)
    assert engine_requests(closed, FRONT) is closed  # a closed loop's arrivals follow its finishes


def _deployment(runtime):
    return ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"), runtime=runtime, tp=1)


def test_the_client_sees_ttft_longer_by_the_host_path_and_the_same_gaps():
    triton = load_runtime("tensorrt-llm-0.14")
    own_clock = replace(triton, serving=replace(triton.serving, client_request_s=0.0, prompt_encode_s=(),
                                                stream_token_s=0.0))
    assert frontend_of(own_clock.serving) is None
    load = Load(kind="rate", num_requests=40, input_len=467, output_len=32, rate_per_s=0.5)  # requests seldom meet
    with_front, without = run_serving(_deployment(triton), load), run_serving(_deployment(own_clock), load)
    front = frontend_of(triton.serving)
    host = front.client_request_s + front.encode_s(np.array([467]))[0] + front.stream_token_s
    assert metric_value(with_front.trace, "ttft_mean") == pytest.approx(metric_value(without.trace, "ttft_mean") + host,
                                                                        rel=0.02)
    assert metric_value(with_front.trace, "itl_mean") == pytest.approx(metric_value(without.trace, "itl_mean"), rel=1e-6)
    assert with_front.trace.arrival_s == pytest.approx(without.trace.arrival_s)  # the client's send times


def test_a_closed_loop_takes_the_client_arrival_before_the_host_path():
    sent = _requests([0.0, 0.0], concurrency=2)
    engine = Trace(arrival_s=np.array([0.0, 0.0]), first_token_s=np.array([0.1, 0.1]), finish_s=np.array([0.2, 0.2]),
                   output_len=np.array([4, 4]), input_len=np.array([100, 100]), itl_s=np.zeros(0), itl_weight=np.zeros(0),
                   steps=1, mean_running=2.0)
    seen = client_trace(engine, sent, FRONT)
    assert seen.ttft_s == pytest.approx([0.1 + 1.2e-3 + 1e-5] * 2)


def test_bad_prompt_encode_points_are_refused_by_name():
    base = load_runtime("tensorrt-llm-0.14").serving.to_dict()
    for bad in ([[100, 1e-3], [50, 2e-3]], [[0, 1e-3]], [[100, -1.0]], [[100]]):
        with pytest.raises(AutotuneError, match="prompt_encode_s"):
            serving_engine_from_dict(dict(base, prompt_encode_s=bad))
