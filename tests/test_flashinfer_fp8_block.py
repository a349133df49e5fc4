"""SGLang's block-FP8 linear on B200 with DeepGEMM off (cost/flashinfer_fp8_block.py): the launch environment the
notes quote picks FlashInfer's groupwise FP8 GEMM for 0.5.12, whose prompt-size waves run at ~0.73 PFLOP/s against
DeepGEMM's 2.91, while a one-wave (decode) GEMM keeps the DeepGEMM linear's measured time."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np

from autotune.calibrate.serving_flags import deepgemm_flags
from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import flashinfer_fp8_block as fi
from autotune.cost.serving_experts import non_expert_s
from autotune.cost.serving_ops import ACT_BYTES, select_ops
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_device
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

ROOT = Path(__file__).parent.parent
CHECK = ROOT / "tests" / "data" / "sglang_newer_check.csv"


def _row(row_id: str) -> dict:
    with open(CHECK, newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == row_id)


def test_deepgemm_off_in_the_launch_environment_runs_flashinfer_from_0_5_12():
    sglang, vllm = load_runtime("sglang").serving, load_runtime("vllm").serving
    assert deepgemm_flags(sglang, "0.5.12", "export SGL_ENABLE_JIT_DEEPGEMM=false") == {"fp8_block_gemm": "flashinfer"}
    assert deepgemm_flags(sglang, "0.5.14", "SGLANG_ENABLE_JIT_DEEPGEMM=0 python -m sglang.launch_server") \
        == {"fp8_block_gemm": "flashinfer"}
    assert deepgemm_flags(sglang, "0.5.12", "export SGL_ENABLE_JIT_DEEPGEMM=true") == {}
    assert deepgemm_flags(sglang, "0.5.6", "export SGL_ENABLE_JIT_DEEPGEMM=false") == {}  # another dispatch
    assert deepgemm_flags(vllm, "0.11.0", "export SGL_ENABLE_JIT_DEEPGEMM=false") == {}


def test_the_b200_fp8_recipe_rows_take_flashinfer_and_the_h200_rows_do_not():
    assert case_from_row(_row("sglnew-014")).deployment.runtime.serving.fp8_block_gemm == "flashinfer"
    assert case_from_row(_row("sglnew-019")).deployment.runtime.serving.fp8_block_gemm == ""


def _linears(tp: int, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeepSeek's MoE-layer linears on B200: (the DeepGEMM linear fit, FlashInfer's kernel) for each token count."""
    device, model = load_device("b200"), resolve_model("deepseek-v3")
    deepgemm = device.with_changes(compute={**device.compute, ("gemm", "fp8"): device.compute[("serving_gemm_sglang", "fp8_block")]})
    layer = model_tables(model, 1, ACT_BYTES, "flash").moe_layer
    table = select_ops(layer, fi.flashinfer_gemms(layer, model, "fp8"))

    def one_wave(part):
        return non_expert_s(part, model, deepgemm, "fp8", "fp8", tokens, tp)

    return one_wave(table), fi.flashinfer_linears_s(table, deepgemm, tokens, tp, one_wave)


def test_a_decode_keeps_deepgemms_time_and_a_long_prompt_runs_several_times_slower():
    tokens = np.array([1.0, 8.0, 32.0, 7372.0])
    deepgemm, flashinfer = _linears(4, tokens)
    assert np.allclose(flashinfer[:3], deepgemm[:3])  # every linear's tiles fit in one wave
    assert flashinfer[3] > 4.0 * deepgemm[3]  # 0.73 against 2.91 PFLOP/s, and the activation's quantization


def test_the_module_constants_are_the_scripts_fit():
    spec = importlib.util.spec_from_file_location("fit_fi", ROOT / "scripts" / "fit_flashinfer_fp8_block.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    first, more = script.wave_fits()
    assert np.allclose(first, fi._FIRST_WAVE, rtol=0.01) and np.allclose(more, fi._NEXT_WAVE, rtol=0.01)
    # the L2-resident rows past one wave within 3% of what they measure
    for m, n, k, measured in script.PR13528:
        if n * k < script.L2_BYTES and script.waves(m, n) > 1:
            assert abs(script.priced_s(m, n, k, first, more) * 1e6 / measured - 1) < 0.03


def test_the_b200_fp8_8k_prompt_row_is_priced_slower_than_under_deepgemm():
    row = _row("sglnew-014")
    without = dict(row, notes=row["notes"].replace("SGL_ENABLE_JIT_DEEPGEMM=false", "SGL_ENABLE_JIT_DEEPGEMM=true"))
    flashinfer, deepgemm = (check.predicted for check in check_serving_rows([row, without]))
    assert flashinfer > 1.4 * deepgemm  # an 8k-token prompt step's linears, ~5x slower
