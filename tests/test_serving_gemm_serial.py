"""A GEMM fit's serial main-loop arm (Regression.serial_latency_s, seconds_per_reduction): with a few rows an
engine's NVFP4 linear takes a fixed latency plus a time per unit of K (its one wave of tiles loops over K in
series), not the large-M fit's intercept, so a short-K projection is cheaper than a long-K one of the same
weights; at many rows the FLOP arm is unchanged."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.serving_ops import ops_s, select_ops
from autotune.cost.serving_step import serving_cluster
from autotune.errors import AutotuneError
from autotune.graph.table import model_tables
from autotune.spec.hardware import Regression
from autotune.spec.hardware_data import load_cluster, regression_from_dict
from autotune.spec.presets import resolve_model


def test_the_arm_is_read_and_validated():
    fit = regression_from_dict({"latency_s": 6e-6, "seconds_per_flop": 2e-16, "serial_latency_s": 4e-6,
                                "seconds_per_reduction": 9e-10}, "fit", "seconds_per_flop")
    assert (fit.serial_latency_s, fit.seconds_per_reduction) == (4e-6, 9e-10)
    assert regression_from_dict({"latency_s": 6e-6, "seconds_per_flop": 2e-16}, "fit", "seconds_per_flop").seconds_per_reduction == 0
    with pytest.raises(AutotuneError, match="seconds_per_reduction"):
        Regression(latency_s=1e-6, seconds_per_unit=1e-15, seconds_per_reduction=-1.0)


def _gemm_s(cluster, name: str, tokens: float, tp: int = 4) -> float:
    layer = model_tables(resolve_model("deepseek-v3"), 1, 2, "flash").moe_layer
    one = select_ops(layer, np.array([n == name for n in layer.names]))
    return float(ops_s(one, cluster.device, "nvfp4", "nvfp4", np.array([tokens]), tp)[0])


def test_a_short_k_projection_costs_less_at_one_token_and_the_flop_arm_holds_at_many():
    """DeepSeek's shared expert at TP4 on B300 under SGLang's fit: the down projection (K = 512) against
    the up (K = 7168), measured 5.2 / 9.7 us at M = 1 (aiconfigurator SGLang 0.5.9 B300 rows)."""
    sglang = serving_cluster(load_cluster("dgx-b300").for_gpus(4), "sglang")
    assert sglang.device.regression("gemm", "nvfp4").seconds_per_reduction > 0
    up, down = _gemm_s(sglang, "shared_up", 1.0), _gemm_s(sglang, "shared_down", 1.0)
    assert down < 0.7 * up
    # priced as fitted (Regression.in_engine), against the measured op itself
    assert down == pytest.approx(5.2e-6, rel=0.3) and up == pytest.approx(9.7e-6, rel=0.3)  # the fit's rms: 19%
    # the FLOP arm decides a 16k-token chunk: the serial arm does not move it
    fit = sglang.device.regression("gemm", "nvfp4")
    flat = sglang.with_changes(device=sglang.device.with_changes(compute={
        **sglang.device.compute, ("gemm", "nvfp4"): replace(fit, serial_latency_s=0.0, seconds_per_reduction=0.0)}))
    assert _gemm_s(flat, "shared_up", 16384.0) == pytest.approx(_gemm_s(sglang, "shared_up", 16384.0))
    assert _gemm_s(flat, "shared_up", 1.0) < up


# aiconfigurator @095f58a5 gemm_perf.parquet nvfp4 rows at M = 1 (us): N 7168 K 512, N 1024 K 7168 (the shared
# expert's down and up projections at TP4), TensorRT-LLM (torch_flow) and vLLM 0.19.0 (vllm_default)
_MEASURED_M1_US = [("dgx-b200", "linear", 7.46, 19.03), ("dgx-b300", "linear", 7.08, 15.74),
                   ("gb200-nvl72", "linear", 6.71, 17.77), ("gb300-nvl72", "linear", 7.11, 15.74),
                   ("dgx-b200", "vllm", 6.13, 10.06), ("dgx-b300", "vllm", 5.61, 10.01),
                   ("gb200-nvl72", "vllm", 5.63, 9.84), ("gb300-nvl72", "vllm", 5.37, 9.71)]
# B300 / GB300 TensorRT-LLM: the refit's FLOP-arm intercept (10.0 us, held up by its M 512 rows) floors the
# short-K projection at +41%; the serial arm prices it 6.6 us but the max takes the intercept
_FLOORED = {("dgx-b300", "linear"), ("gb300-nvl72", "linear")}


def _m1_s(name: str, fit: str) -> tuple[float, float, object]:
    cluster = serving_cluster(load_cluster(name).for_gpus(4), fit)
    return _gemm_s(cluster, "shared_down", 1.0), _gemm_s(cluster, "shared_up", 1.0), cluster


@pytest.mark.parametrize(("name", "fit", "down_us", "up_us"), _MEASURED_M1_US)
def test_trtllm_and_vllm_fits_carry_the_serial_arm(name, fit, down_us, up_us):
    """TensorRT-LLM's and vLLM's NVFP4 linears have the same serial structure at M = 1 (time grows with K
    whatever N is): their fits price the long-K projection within the fits' scatter, and dearer than the short."""
    down, up, cluster = _m1_s(name, fit)
    assert cluster.device.regression("gemm", "nvfp4").seconds_per_reduction > 0
    assert down < 0.8 * up
    assert up == pytest.approx(up_us * 1e-6, rel=0.3)


@pytest.mark.parametrize(("name", "fit", "down_us"), [
    pytest.param(n, f, d, marks=pytest.mark.xfail(strict=True, reason="FLOP-arm intercept floor")) if (n, f) in _FLOORED
    else (n, f, d) for n, f, d, _ in _MEASURED_M1_US])
def test_the_short_k_projection_at_one_token(name, fit, down_us):
    assert _m1_s(name, fit)[0] == pytest.approx(down_us * 1e-6, rel=0.3)


# aiconfigurator @095f58a5 h100_sxm / h200_sxm gemm/vllm/0.19.0 gemm_perf.parquet, fp8_block rows (vLLM's CUTLASS
# blockwise linear with its per-token-group quantization) at M = 4 (us): Qwen3-235B-A22B's output projection at
# TP 4 (N 4096, K 2048) and TP 8 (N 4096, K 1024)
_VLLM_FP8_BLOCK_M4_US = [("dgx-h100", 14.84, 11.14), ("dgx-h200", 14.97, 11.26)]


@pytest.mark.parametrize(("name", "tp4_us", "tp8_us"), _VLLM_FP8_BLOCK_M4_US)
def test_vllm_block_fp8_linear_on_hopper_at_decode_rows(name, tp4_us, tp8_us):
    """vLLM's block-FP8 linear on Hopper at a decode batch's few rows: a serial loop over K (the TP 4 projection,
    twice the K, dearer than the TP 8 one), each within the fit's scatter of the measured kernel, where the
    intercept-only fit (26.4 / 25.5 us) priced both at 1.8-2.4x."""
    layer = model_tables(resolve_model("qwen3-235b-a22b"), 1, 2, "flash").moe_layer
    one = select_ops(layer, np.array([n == "out_proj" for n in layer.names]))
    cluster = serving_cluster(load_cluster(name), "vllm", True)
    assert cluster.device.regression("gemm", "fp8").seconds_per_reduction > 0
    # priced as fitted (Regression.in_engine), against the measured op itself
    tp4, tp8 = (float(ops_s(one, cluster.device, "fp8", "fp8", np.array([4.0]), tp)[0]) for tp in (4, 8))
    assert tp8 < 0.85 * tp4
    assert tp4 == pytest.approx(tp4_us * 1e-6, rel=0.2) and tp8 == pytest.approx(tp8_us * 1e-6, rel=0.2)

