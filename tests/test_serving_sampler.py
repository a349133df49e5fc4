"""The greedy sampler's passes over the logits (cost/serving_sampler.py): priced on the head's rows at
the device's memory-bound fit, a rank's own rows under attention DP, the TP gather's copy only when
the head is split, and nothing for an engine whose preset names no passes."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.cost.serving_sampler import logits_passes_s
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

LLAMA8B = resolve_model("llama3-8b")


def _dep(runtime: str, tp: int = 1, sampler: bool = True, **kw) -> ServingDeployment:
    rt = load_runtime(runtime)
    if not sampler:
        rt = rt.with_changes(serving=rt.serving.with_changes(sampler_pass_bytes=(), logits_gather_copy_bytes=0.0))
    return ServingDeployment(model=kw.pop("model", LLAMA8B), cluster=load_cluster(kw.pop("cluster", "dgx-h100")),
                             runtime=rt, tp=tp, replicas=1, weight_dtype=kw.pop("dtype", "bf16"), **kw)


def _added_s(runtime: str, rows: int, **kw) -> float:
    on, off = (replica_step_model(_dep(runtime, sampler=s, **kw), max_tokens=rows, max_sampled=rows) for s in (True, False))
    return float(on.head_s[rows] - off.head_s[rows])


def test_passes_stream_their_bytes_at_the_device_memory_fit():
    device = load_cluster("dgx-h100").device
    rows = np.array([0.0, 1.0, 256.0, 512.0])
    t = logits_passes_s(device, 128256, rows, (6.0, 4.0))
    assert t[0] == 0.0
    fit = device.memory_regression("stream")
    slope = 10.0 * 128256 * fit.seconds_per_unit / device.kernel_efficiency
    assert t[3] - t[2] == pytest.approx(256 * slope)  # linear in the rows: 10 bytes a logit
    assert t[1] == pytest.approx((2 * fit.latency_s) / device.kernel_efficiency + slope)  # two launches


def test_vllm_greedy_step_gains_its_cast_and_argmax_and_the_tp_gather_copy():
    device = load_cluster("dgx-h100").device
    one = _added_s("vllm-0.9.2", 512)
    assert one == pytest.approx(float(logits_passes_s(device, LLAMA8B.vocab_size, np.array([512.0]), (6, 4))[0]))
    four = _added_s("vllm-0.9.2", 512, tp=4)  # every TP rank samples the gathered rows, after the gather's copy
    assert four == pytest.approx(float(logits_passes_s(device, LLAMA8B.vocab_size, np.array([512.0]), (6, 4, 4))[0]))
    assert four > one > 0.0


def test_v0_engine_makes_more_passes_than_v1():
    assert _added_s("vllm-0.6", 256) > 3 * _added_s("vllm-0.9.2", 256)


def test_attention_dp_samples_a_rank_s_own_rows_without_the_gather_copy():
    dsv3 = resolve_model("deepseek-v3")
    kw = dict(model=dsv3, cluster="dgx-h200", dtype="fp8", tp=8, ep=8)
    dp = _added_s("sglang", 512, attention_dp=True, **kw)
    device = load_cluster("dgx-h200").device
    assert dp == pytest.approx(float(logits_passes_s(device, dsv3.vocab_size, np.array([512 / 8]), (6, 4))[0]))


def test_engine_without_sampler_passes_prices_none():
    assert load_runtime("tensorrt-llm-1.0").serving.sampler_pass_bytes == ()
    assert _added_s("tensorrt-llm-1.0", 256) == 0.0
