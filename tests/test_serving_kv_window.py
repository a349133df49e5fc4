"""vLLM's hybrid KV cache manager in the serving simulation: sliding-window layers free the blocks
behind their window (v1/core/single_type_kv_cache_manager.py SlidingWindowManager, vLLM 0.9.2 on), so a
request of a windowed model holds its full layers' blocks and only a window's worth on the others."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.serving_eval import ServingDeployment, _window_release, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_kv import held_tokens
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def _deployment(runtime: str, model: str = "gpt-oss-120b") -> ServingDeployment:
    return ServingDeployment(model=resolve_model(model), cluster=load_cluster("dgx-h100"), runtime=load_runtime(runtime),
                             tp=2, weight_dtype="mxfp4" if model.startswith("gpt-oss") else "bf16")


def _schedule(share: float, capacity: int) -> Schedule:
    return Schedule(scheduler="mixed", chunked_prefill=True, prefill_chunk_tokens=0, max_num_seqs=1024,
                    max_num_batched_tokens=8192, kv_capacity_tokens=capacity, kv_block_tokens=16,
                    kv_reservation="grow", kv_windowed_share=share, kv_window_tokens=128 if share else 0)


def test_a_decoding_request_holds_its_full_layers_and_a_window_on_the_others():
    half = _schedule(0.5, 10**6)
    # 400 tokens: 25 blocks on the full layers; (400 - 128) // 16 = 17 blocks behind the window freed on the others
    assert held_tokens(half, np.array([400]))[0] == 400 - 0.5 * 17 * 16
    assert held_tokens(half, np.array([100]))[0] == 112  # inside the window: every block on every layer
    assert held_tokens(_schedule(0.0, 10**6), np.array([400]))[0] == 400


def test_freed_windows_let_more_requests_run_without_preemption():
    step = run_serving(_deployment("vllm-0.9.2"), Load(kind="max_throughput", num_requests=1, input_len=100,
                                                       output_len=2)).step
    n = 64
    req = Requests(arrival_s=np.zeros(n), input_len=np.full(n, 200), output_len=np.full(n, 600))
    capacity = 40_000  # 64 x 800 tokens do not fit whole (51,200); with half the layers windowed they do
    whole, windowed = (simulate(req, _schedule(share, capacity), step) for share in (0.0, 0.5))
    assert windowed.prefilled_tokens == int(req.input_len.sum())  # nobody preempted and recomputed
    assert whole.prefilled_tokens > windowed.prefilled_tokens
    assert windowed.duration_s < whole.duration_s
    # the decode stretches advance as the single steps do
    single = simulate(req, _schedule(0.5, capacity), step, fast_forward=False)
    assert np.allclose(single.finish_s, windowed.finish_s)


def test_the_vllm_presets_release_windows_from_0_9_2_and_only_sliding_ones():
    assert not load_runtime("vllm-0.9").serving.kv_window_release  # 0.9.0 unifies windows into full attention
    for name in ("vllm-0.9.2", "vllm-0.14", "vllm"):
        assert load_runtime(name).serving.kv_window_release
    assert _window_release(_deployment("vllm-0.9.2")) == {"kv_windowed_share": 0.5, "kv_window_tokens": 128}
    assert _window_release(_deployment("vllm-0.9")) == {}
    assert _window_release(_deployment("vllm-0.9.2", model="llama3-8b")) == {}


def test_a_window_share_needs_a_window():
    with pytest.raises(AutotuneError, match="kv_windowed_share"):
        replace(_schedule(0.0, 10), kv_windowed_share=0.5)
