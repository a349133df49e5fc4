"""Two costs of vLLM's DeepSeek prompt steps the kernels' tables do not hold: the BF16 input pad of 0.10.2-0.11's
block-FP8 linears on Hopper (cost/vllm_fp8_pad.py) and MLA's re-expansion of a chunk's cached prefix through
kv_b_proj (cost/vllm_mla_prefix.py)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.calibrate.serving_rows import engine_runtime
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.cost.vllm_fp8_pad import fp8_block_pad_s, release_fp8_pad_runtime
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model

STEP = dict(kv_bytes=2.0, max_tokens=8192, max_sampled=1, nvfp4_gemm_fit="vllm")


@pytest.mark.parametrize(("version", "pads"), [("0.10.1", False), ("0.10.2", True), ("0.11.0", True),
                                               ("0.11.1", False), ("0.13.0", False)])
def test_the_pad_follows_the_release(version, pads):
    assert engine_runtime("vllm", version).serving.fp8_block_input_pad is pads


def test_other_engines_never_pad():
    sglang = engine_runtime("sglang", "0.5.3")
    assert not release_fp8_pad_runtime(sglang, "0.11.0").serving.fp8_block_input_pad


def test_pad_moves_the_inputs_bytes_twice_and_fills_once():
    model, device = resolve_model("deepseek-v3"), load_cluster("dgx-h200").device
    layer = model_tables(model, 1, 2, "flash").moe_layer
    tokens = np.array([0.0, 1024.0, 8192.0])
    s = fp8_block_pad_s(layer, device, tokens, 8)
    fit = device.memory_regression("stream")
    # q_a + kv_a (7168), q_b (1536), o (2048 a GPU), shared up (7168) and down (256 a GPU): not kv_b, not the router
    width = 7168 + 1536 + 16384 / 8 + 7168 + 2048 / 8
    per_token = 3 * 2 * width * fit.seconds_per_unit / device.kernel_efficiency
    assert s[2] - s[1] == pytest.approx(7168 * per_token, rel=1e-9)
    assert s[0] == pytest.approx((5 * 2 * fit.latency_s + 4 * 2 * width * fit.seconds_per_unit) / device.kernel_efficiency)


def test_the_step_pays_the_pad_on_hopper_fp8_blocks_only():
    model = resolve_model("deepseek-v3")
    assert model.fp8_block_scaled
    hopper, blackwell = load_cluster("dgx-h200").for_gpus(8), load_cluster("dgx-b200").for_gpus(8)
    plain = step_model(model, hopper, ReplicaShape(tp=8), weight_dtype="fp8", **STEP)
    padded = step_model(model, hopper, ReplicaShape(tp=8), weight_dtype="fp8", fp8_input_pad=True, **STEP)
    extra = padded.linear_s[8192] - plain.linear_s[8192]
    assert 0.03 * plain.linear_s[8192] < extra < 0.1 * plain.linear_s[8192]  # ~17 ms on ~290
    b_plain = step_model(model, blackwell, ReplicaShape(tp=8), weight_dtype="fp8", **STEP)
    b_flag = step_model(model, blackwell, ReplicaShape(tp=8), weight_dtype="fp8", fp8_input_pad=True, **STEP)
    assert np.array_equal(b_plain.linear_s, b_flag.linear_s)
    bf16 = [step_model(model, hopper, ReplicaShape(tp=8), weight_dtype="bf16", fp8_input_pad=pad, **STEP) for pad in (0, 1)]
    assert np.array_equal(bf16[0].linear_s, bf16[1].linear_s)


def test_a_chunk_pays_for_its_cached_prefix_under_vllm_mla():
    model, cluster = resolve_model("deepseek-v3"), load_cluster("dgx-h200").for_gpus(8)
    vllm = step_model(model, cluster, ReplicaShape(tp=8), weight_dtype="fp8", mla_prefix=True, **STEP)
    other = step_model(model, cluster, ReplicaShape(tp=8), weight_dtype="fp8", **STEP)
    assert other.prefix_s_per_token == 0.0
    # kv_b_proj's 2 x 512 x 4096 FLOPs a token a layer and ~12.7 KB of moves: 0.3-1 us a token over 61 layers
    assert 0.3e-6 < vllm.prefix_s_per_token < 1e-6
    chunk = dict(decodes=0, context=0.0, prefill_tokens=8192, pairs=8192 * (24576 + 8193 / 2), sampled=1)
    fresh = vllm.gpu_s(**chunk)
    assert vllm.gpu_s(**chunk, prefix_tokens=24576) - fresh == pytest.approx(24576 * vllm.prefix_s_per_token)
    assert other.gpu_s(**chunk, prefix_tokens=24576) == pytest.approx(other.gpu_s(**chunk))
    # decode steps never pay it
    assert vllm.gpu_s(decodes=4, context=4000, prefill_tokens=0, pairs=0, sampled=4, prefix_tokens=24576) == \
        pytest.approx(vllm.gpu_s(decodes=4, context=4000, prefill_tokens=0, pairs=0, sampled=4))


def test_models_without_mla_have_no_prefix_cost():
    model, cluster = resolve_model("llama3-70b"), load_cluster("dgx-h200").for_gpus(8)
    step = step_model(model, cluster, ReplicaShape(tp=8), weight_dtype="bf16", mla_prefix=True, **STEP)
    assert step.prefix_s_per_token == 0.0
