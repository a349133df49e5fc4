"""TensorRT-LLM's routed experts from its measured MoE layers (cost/serving_moe_table.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune.cost import serving_step as ss
from autotune.cost.serving_moe_table import _layers, measured_moe_key, measured_moe_s
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model

DEEPSEEK = resolve_model("deepseek-v3")
BLOCK_FP8 = dataclasses.replace(DEEPSEEK, fp8_block_scaled=True)  # deepseek-ai's own checkpoint
PER_TENSOR = dataclasses.replace(DEEPSEEK, fp8_block_scaled=False)


QWEN3 = resolve_model("qwen3-235b-a22b")  # nvidia/Qwen3-235B-A22B-FP8: per-tensor FP8
H200_1X8 = "h200.cutlass.fp8_block.7168x2048x256x8@1.01.1x8"


def test_the_table_covers_each_measured_shape_at_its_routing_and_split():
    assert measured_moe_key(BLOCK_FP8, "H200-SXM-141GB", "fp8", "", 8, 8) == H200_1X8
    assert measured_moe_key(DEEPSEEK, "B200-SXM-180GB", "nvfp4", "trtllm", 8, 2) == "b200.trtllm.nvfp4.7168x2048x256x8@1.01.4x2"
    # experts TP-split (moe_tp = tp, ep 1) and one GPU are measured too, for Qwen3's shapes at alpha 1.2
    assert measured_moe_key(QWEN3, "H200-SXM-141GB", "fp8", "", 8, 1) == "h200.cutlass.fp8.4096x1536x128x8@1.2.8x1"
    assert measured_moe_key(resolve_model("qwen3-30b-a3b"), "B200-SXM-180GB", "nvfp4", "", 1, 1) == \
        "b200.cutlass.nvfp4.2048x768x128x8@1.2.1x1"
    assert measured_moe_key(BLOCK_FP8, "H200-SXM-141GB", "fp8", "", 8, 8, eplb=True) == ""  # a balancer: not this routing
    assert measured_moe_key(PER_TENSOR, "H200-SXM-141GB", "fp8", "", 8, 8) == ""  # DeepSeek per-tensor FP8 is not measured
    assert measured_moe_key(DEEPSEEK, "A100-SXM4-80GB", "bf16", "", 8, 8) == ""
    assert measured_moe_key(resolve_model("kimi-k2"), "H200-SXM-141GB", "fp8", "", 8, 8) == ""  # 384 experts
    assert measured_moe_key(resolve_model("llama4-maverick-17b-128e"), "H200-SXM-141GB", "fp8", "", 8, 8) == ""  # not kept
    # DeepSeek's shape routed without groups (alpha 1.2) is not what the table measured (alpha 1.01)
    assert measured_moe_key(dataclasses.replace(BLOCK_FP8, router_groups=0), "H200-SXM-141GB", "fp8", "", 8, 8) == ""


def test_the_layer_time_is_the_measured_one_between_and_beyond_its_points():
    key = H200_1X8
    points, ms = (np.asarray(v, dtype=float) for v in _layers()[key])
    assert measured_moe_s(key, points) == pytest.approx(ms * 1e-3)
    mid = np.sqrt(points[-3] * points[-2])  # log-log: the geometric mean of two points' times
    assert measured_moe_s(key, [mid])[0] == pytest.approx(np.sqrt(ms[-3] * ms[-2]) * 1e-3)
    far = measured_moe_s(key, [points[-1], 2 * points[-1], 3 * points[-1]])
    assert far[2] - far[1] == pytest.approx(far[1] - far[0]) and far[2] > far[1] > far[0]  # linear past the last
    assert measured_moe_s(key, [0.0])[0] == pytest.approx(ms[0] * 1e-3)  # an empty step: the first point


def test_past_the_last_point_one_low_point_does_not_flatten_the_layer():
    key = "h200.cutlass.fp8.4096x1536x128x8@1.2.1x8"  # 16,384 tokens measured barely above 12,288
    points, ms = (np.asarray(v, dtype=float) for v in _layers()[key])
    assert ms[-1] - ms[-2] < 0.1 * (ms[-2] - ms[-4])  # the series as measured
    at = measured_moe_s(key, [points[-1] / 2, points[-1], 1.5 * points[-1]])
    assert at[2] - at[1] == pytest.approx(at[1] - at[0])  # the slope over the last doubling of tokens


def _step(table: str):
    cluster = load_cluster("dgx-h200").for_gpus(8)
    shape = ss.ReplicaShape(tp=8, ep=8, attention_dp=True)
    return ss.step_model(BLOCK_FP8, cluster, shape, weight_dtype="fp8", kv_bytes=1.0, max_tokens=4096, max_sampled=8,
                         nvfp4_gemm_fit="linear", moe_layer_table=table)


def test_a_step_prices_its_moe_layers_at_the_table_where_the_engine_says_so():
    measured, fitted = _step("trtllm"), _step("")
    moe_layers = DEEPSEEK.num_layers - DEEPSEEK.first_k_dense_layers
    tokens = np.array([1024, 4096])
    layer = measured_moe_s(H200_1X8, tokens)
    # the rest of the step is the same: the difference is the MoE layers' routed experts, table for fit
    fit = (layer * moe_layers - (measured.linear_s[tokens] - fitted.linear_s[tokens])) / moe_layers
    assert np.all(fit > 0) and np.all(fit < layer)  # at these counts the fit prices the busiest rank lower
    assert np.array_equal(measured.rank_linear_s, fitted.rank_linear_s)


def test_experts_split_over_eight_gpus_take_the_measured_layer_too():
    cluster = load_cluster("dgx-h200").for_gpus(8)
    shape = ss.ReplicaShape(tp=8, ep=1, attention_dp=True)
    steps = [ss.step_model(QWEN3, cluster, shape, weight_dtype="fp8", kv_bytes=1.0, max_tokens=4096, max_sampled=8,
                           moe_layer_table=table) for table in ("trtllm", "")]
    tokens = np.array([1024, 4096])
    extra = (steps[0].linear_s[tokens] - steps[1].linear_s[tokens]) / QWEN3.num_layers  # every Qwen3 layer is MoE
    layer = measured_moe_s("h200.cutlass.fp8.4096x1536x128x8@1.2.8x1", tokens)
    assert np.all(extra > 0.2 * layer) and np.all(extra < layer)  # the measured layer runs well above the fit here


def test_an_mtp_module_in_another_format_drafts_at_its_own_costs():
    from autotune.cost.checkpoint_layout import bf16_mtp
    from autotune.cost.serving_speculative import Speculation, speculative_step

    assert bf16_mtp(DEEPSEEK, "nvfp4") and not bf16_mtp(DEEPSEEK, "fp8")  # tech blog 1: "3x MTP Layers: bf16"
    assert not bf16_mtp(resolve_model("qwen3-235b-a22b"), "nvfp4")
    base, spec = _step("trtllm"), Speculation(method="mtp", draft_tokens=3, acceptance_length=2.82)
    heavier = dataclasses.replace(base, linear_s=2.0 * base.linear_s)
    step = dict(decodes=64, context=64 * 2048.0, prefill_tokens=0, pairs=0.0, sampled=64)
    same, own = speculative_step(base, spec), speculative_step(base, spec, draft=heavier)
    assert speculative_step(base, spec, draft=base).gpu_s(**step) == pytest.approx(same.gpu_s(**step))
    # each of the k drafts runs one average layer of the draft's operators: here one more layer's worth of base's
    extra = spec.draft_tokens * base.linear_s[64] / base.num_layers / spec.acceptance_length
    assert own.gpu_s(**step) - same.gpu_s(**step) == pytest.approx(extra)
    assert own.weight_bytes_per_gpu == same.weight_bytes_per_gpu  # the draft's weights here are base's


def test_b200_and_gb200_layers_differ_by_their_hardware_not_their_routing_draws():
    # one die at 1,000 W and 1,200 W: aiconfigurator's balanced MoE rows put GB200 a few percent ahead, while one
    # unseeded power-law draw had put its DeepSeek moe_ep 8 layer 1.6-1.9x ahead of B200's (scripts/extract_trtllm_moe.py
    # --pool-draws takes the median of four draws)
    layers = _layers()
    ratios = {key: np.median([dict(zip(*layers["g" + key]))[n] / t for n, t in zip(*layers[key])
                              if n in dict(zip(*layers["g" + key]))])
              for key in layers if key.startswith("b200.") and "g" + key in layers}
    assert len(ratios) > 300
    assert all(0.85 < r < 1.05 for r in ratios.values()), {k: r for k, r in ratios.items() if not 0.85 < r < 1.05}
