"""AutoQuantize checkpoints (cost/serving_mix.py): NVIDIA's MLPerf v5.0 Mixtral 8x7B engines run a ModelOpt
mix of formats at a published effective_bits (7.25 on Blackwell over NVFP4 / FP8, 8.75 on Hopper over FP8 /
FP16), priced as the two narrowest formats in the shares that average those bits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_limits, replica_step_model
from autotune.cost.serving_mix import autoquantize_mix, blend_steps
from autotune.errors import AutotuneError

_ROW = dict(id="mix", source="placeholder", hf_model_id="", arch="", params_b="", tp="", pp="", ep="", dp="",
            precision="", engine="mlperf-nvidia", engine_version="MLPerf v5.0 NVIDIA TensorRT-LLM harness; TensorRT 10.8",
            isl="", osl="", metric="output_tokens_per_s", value="1000", unit="tokens/s (system)",
            notes="OpenOrca/GSM8K/MBXP 15,000-sample set")
_MIXTRAL, _LLAMA2 = "Mixtral-8x7B (MLPerf mixtral-8x7b)", "Llama-2-70B (MLPerf llama2-70b)"


def _case(model: str, gpu: str, load: str = "Offline scenario"):
    return case_from_row(dict(_ROW, model=model, gpu=gpu, gpus="8", concurrency_or_batch=load))


@pytest.mark.parametrize(("precision", "bits", "want"), [
    ("nvfp4", 7.25, (("nvfp4", 0.1875), ("fp8", 0.8125))),
    ("fp8", 8.75, (("fp8", 0.90625), ("bf16", 0.09375))),
    ("nvfp4", 4.0, (("nvfp4", 1.0),)),
])
def test_the_mix_averages_the_published_bits(precision, bits, want):
    mix = autoquantize_mix(precision, bits)
    assert [d for d, _ in mix] == [d for d, _ in want]
    assert [s for _, s in mix] == pytest.approx([s for _, s in want])
    assert sum(s * {"nvfp4": 4, "fp8": 8, "bf16": 16}[d] for d, s in mix) == pytest.approx(bits)


@pytest.mark.parametrize(("precision", "bits"), [("nvfp4", 9.0), ("fp8", 7.0), ("bf16", 12.0)])
def test_bits_no_two_formats_reach_are_refused(precision, bits):
    with pytest.raises(AutotuneError):
        autoquantize_mix(precision, bits)


def test_a_blend_weights_the_costs_and_keeps_what_the_format_does_not_touch():
    dep = _case(_MIXTRAL, "B200-SXM-180GB").deployment
    fp4 = replica_step_model(replace(dep, weight_mix=()), max_tokens=256, max_sampled=8)
    fp8 = replica_step_model(replace(dep, weight_mix=(), weight_dtype="fp8"), max_tokens=256, max_sampled=8)
    mixed = blend_steps((fp4, fp8), (0.25, 0.75))
    assert np.allclose(mixed.linear_s, 0.25 * fp4.linear_s + 0.75 * fp8.linear_s)
    assert mixed.weight_bytes_per_gpu == pytest.approx(0.25 * fp4.weight_bytes_per_gpu + 0.75 * fp8.weight_bytes_per_gpu)
    assert (mixed.decode_s_per_position, mixed.num_layers) == (fp4.decode_s_per_position, fp4.num_layers)
    with pytest.raises(AutotuneError):
        blend_steps((fp4, fp8), (0.5, 0.6))


def test_the_blackwell_mixtral_system_prices_its_mix_between_its_formats():
    """v5.0 B200 Mixtral: 7.25 bits, NVFP4 / FP8; a large step costs more than all-NVFP4 and less than all-FP8,
    and its weights leave a KV cache between the two."""
    case = _case(_MIXTRAL, "B200-SXM-180GB")
    dep = case.deployment
    assert dep.dtype == "nvfp4" and dict(dep.weight_mix) == pytest.approx({"nvfp4": 0.1875, "fp8": 0.8125})
    assert any("effective_bits 7.25" in a for a in case.assumed)
    steps = [replica_step_model(d, max_tokens=4096, max_sampled=8) for d in
             (replace(dep, weight_mix=()), dep, replace(dep, weight_mix=(), weight_dtype="fp8"))]
    assert steps[0].linear_s[4096] < steps[1].linear_s[4096] < steps[2].linear_s[4096]
    caps = [replica_limits(d, case.load).kv_capacity_tokens for d in
            (replace(dep, weight_mix=()), dep, replace(dep, weight_mix=(), weight_dtype="fp8"))]
    assert caps[0] > caps[1] > caps[2]


def test_the_hopper_mixtral_system_keeps_some_fp16_layers_and_other_systems_none():
    hopper = _case(_MIXTRAL, "H200-SXM-141GB", "Server scenario, target_qps=428").deployment
    assert dict(hopper.weight_mix) == pytest.approx({"fp8": 0.90625, "bf16": 0.09375})
    assert _case(_LLAMA2, "B200-SXM-180GB").deployment.weight_mix == ()
    # a row whose own precision cell differs from the system's checkpoint is priced as it says
    own = case_from_row(dict(_ROW, model=_MIXTRAL, gpu="B200-SXM-180GB", gpus="8", precision="fp8",
                             concurrency_or_batch="Offline scenario"))
    assert own.deployment.weight_mix == () and own.deployment.dtype == "fp8"
