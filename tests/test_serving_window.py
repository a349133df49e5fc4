"""Windowed layers in a serving step's attention (cost/serving_window.py): a sliding-window layer's decode reads
min(context, W) positions and its prompt queries score at most W keys (FlashAttention-3's local key loop starts at
the window, hopper/block.h get_n_block_min_max); a chunked layer (Llama 4) its own chunk's; full-attention models
keep every position."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.cost.serving_window import NO_WINDOW, AttentionWindow, model_window
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def _brute_pairs(done: int, takes: int, window: int, chunked: bool) -> int:
    return sum(((p - 1) % window) + 1 if chunked else min(p, window) for p in range(done + 1, done + takes + 1))


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("done,takes", [(0, 1), (0, 100), (0, 128), (0, 1000), (50, 200), (127, 2), (300, 5000)])
def test_windowed_pairs_are_the_keys_each_query_scores(chunked, done, takes):
    w = AttentionWindow(share=1.0, tokens=128, chunked=chunked)
    assert w.pairs(np.array([done]), np.array([takes]))[0] == pytest.approx(_brute_pairs(done, takes, 128, chunked))


def test_full_attention_keeps_the_causal_pairs_and_every_position():
    done, takes = np.array([0, 300]), np.array([4000, 50])
    assert np.allclose(NO_WINDOW.pairs(done, takes), takes * (done + (takes + 1) / 2.0))
    assert NO_WINDOW.positions(np.array([10, 5000])) == 5010
    assert model_window(resolve_model("llama3-8b")) is NO_WINDOW


def test_gpt_oss_reads_a_window_on_half_its_layers():
    w = model_window(resolve_model("gpt-oss-120b"))
    assert (w.share, w.tokens, w.chunked) == (0.5, 128, False)
    assert w.positions(np.array([1000])) == pytest.approx(0.5 * 1000 + 0.5 * 128)
    assert w.positions(np.array([100])) == pytest.approx(100)  # inside the window: every position
    # a step later the full layers read one more position each; the windowed ones only below the window
    assert w.growing(np.array([100, 1000])) == pytest.approx(0.5 * 2 + 0.5 * 1)


def test_a_window_needs_its_size():
    with pytest.raises(AutotuneError, match="window.tokens"):
        AttentionWindow(share=0.5, tokens=0)


def _step(model: str):
    dep = ServingDeployment(model=resolve_model(model), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("vllm-0.9.2"), tp=2, weight_dtype="mxfp4")
    return run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=100, output_len=2)).step


def test_long_prompts_and_long_decodes_run_faster_on_windowed_layers():
    step = _step("gpt-oss-120b")
    assert step.window.share == 0.5
    full = type(step)(**{**{f: getattr(step, f) for f in step.__dataclass_fields__}, "window": NO_WINDOW})
    sched = Schedule(scheduler="mixed", chunked_prefill=True, prefill_chunk_tokens=0, max_num_seqs=64,
                     max_num_batched_tokens=8192, kv_capacity_tokens=10**7, kv_block_tokens=16, kv_reservation="grow")
    req = Requests(arrival_s=np.zeros(8), input_len=np.full(8, 16000), output_len=np.full(8, 400))
    windowed, whole = simulate(req, sched, step), simulate(req, sched, full)
    assert windowed.ttft_s.mean() < 0.95 * whole.ttft_s.mean()
    assert windowed.tpot_s.mean() < whole.tpot_s.mean()
    # the decode stretches advance as the single steps do
    single = simulate(req, sched, step, fast_forward=False)
    assert np.allclose(single.finish_s, windowed.finish_s, rtol=1e-3)
