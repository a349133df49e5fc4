"""MLA's absorbed BMMs at an engine's measured cost (ServingEngine.mla_bmm, cost/serving_mla_bmm.py) and MTP
verification of an MLA model, whose 1 + k query tokens a sequence each score every cached position
(serving_eval.verification_s_per_position)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.runtime_kernels import gpu_keys
from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.cost.serving_mla_bmm import mla_bmm_fit
from autotune.cost.serving_speculative import Speculation
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine

DSV3 = resolve_model("deepseek-v3")


def _dep(runtime: str, tp: int = 8, dtype: str = "fp8", **kw) -> ServingDeployment:
    return ServingDeployment(model=DSV3, cluster=load_cluster(kw.pop("cluster", "dgx-b200")), runtime=load_runtime(runtime),
                             tp=tp, replicas=1, weight_dtype=dtype, **kw)


def _without_bmm(dep: ServingDeployment) -> ServingDeployment:
    serving = dep.runtime.serving.with_changes(mla_bmm=())
    return ServingDeployment(**{**dep.__dict__, "runtime": dep.runtime.with_changes(serving=serving)})


def test_rows_pick_the_bmm_dtype_the_engine_runs_for_the_checkpoint():
    trt, sgl = load_runtime("tensorrt-llm-1.0").serving.mla_bmm, load_runtime("sglang").serving.mla_bmm
    h200 = gpu_keys("H200-SXM-141GB")
    fp8, bf16 = mla_bmm_fit(trt, h200, DSV3, "fp8", 16), mla_bmm_fit(trt, h200, DSV3, "bf16", 16)
    assert fp8[1] > 3 * bf16[1]  # Hopper's block-scaled FP8 BMM runs far below BF16's rate
    assert mla_bmm_fit(trt, h200, DSV3, "nvfp4", 16) == bf16  # NVFP4 checkpoints keep attention BF16
    # SGLang dequantizes the FP8 checkpoint's W_UK / W_UV: its BF16 rows price it
    assert mla_bmm_fit(sgl, h200, DSV3, "fp8", 16) == mla_bmm_fit(sgl, h200, DSV3, "bf16", 16)
    assert mla_bmm_fit(trt, h200, DSV3, "fp8", 24) is None
    assert mla_bmm_fit(trt, gpu_keys("A100-SXM4-80GB"), DSV3, "fp8", 16) is None


def test_prompt_steps_keep_the_kv_up_gemm_and_decodes_take_the_measured_bmms():
    for runtime, kw in (("sglang", {}), ("tensorrt-llm-1.0", dict(ep=8, attention_dp=True))):
        dep = _dep(runtime, **kw)
        new, old = (replica_step_model(d, max_tokens=256, max_sampled=256) for d in (dep, _without_bmm(dep)))
        prompt = dict(decodes=0, context=0.0, prefill_tokens=256, pairs=256 * 128.5, sampled=1)
        assert new.gpu_s(**prompt) == pytest.approx(old.gpu_s(**prompt), rel=1e-9)
        heads = 128 if kw else 16
        latency_s, per_token_s = mla_bmm_fit(dep.runtime.serving.mla_bmm, ("b200",), DSV3, "fp8", heads)
        decode = dict(decodes=64, context=64 * 2000.0, prefill_tokens=0, pairs=0.0, sampled=64)
        own = 64 // 8 if kw else 64  # a rank's decodes under DP attention
        gained = new.gpu_s(**decode) - old.gpu_s(**decode)
        bmm_s = DSV3.num_layers * (latency_s + per_token_s * own)
        assert new.decode_bmm_s[own] == pytest.approx(bmm_s)
        assert gained == pytest.approx(bmm_s - new.prompt_up_s[own], rel=1e-6)  # in place of kv_up's GEMM on them
        assert gained > 0.0  # the thin BMMs over heads cost more than the one GEMM


def test_bad_bmm_rows_are_refused():
    with pytest.raises(AutotuneError):
        ServingEngine(engine="sglang", version="0.5", mla_bmm=(("b200", "fp4", 16, 1e-5, 1e-9),))


def _verify_per_position(dep: ServingDeployment) -> tuple[float, float]:
    step = replica_step_model(dep, max_tokens=64, max_sampled=64)
    return step.verify_s_per_position, step.base.decode_s_per_position


def test_compute_bound_verification_costs_a_position_once_per_query_token():
    """DP attention: 128 heads a rank, at the measured row's FLOP bound, so 1 + k tokens cost 1 + k times."""
    for k in (1, 3):
        dep = _dep("tensorrt-llm-1.0", ep=8, attention_dp=True, speculation=Speculation(method="mtp", draft_tokens=k,
                                                                                          acceptance_length=1.5))
        verify, once = _verify_per_position(dep)
        assert verify == pytest.approx((1 + k) * once)


def test_narrow_heads_verification_takes_the_row_of_the_packed_heads():
    """TP 8: 16 heads a GPU; two tokens a sequence pack as 32 query rows: the 32-head row's cost."""
    dep = _dep("tensorrt-llm-1.0", ep=8, speculation=Speculation(method="mtp", draft_tokens=1, acceptance_length=1.9))
    verify, once = _verify_per_position(dep)
    _, _, per_position_32 = dep.runtime.serving.mla_decode_attention_fit(("b200",), 1.0, 32)
    assert verify == pytest.approx(max(per_position_32, once)) and verify >= once


def test_generic_verification_reads_once_and_computes_per_token():
    """vLLM (no measured MLA rows): the roofline with (1 + k) x the heads' FLOPs, the latent read once."""
    spec = Speculation(method="mtp", draft_tokens=3, acceptance_length=2.5)
    narrow = _dep("vllm", tp=8, ep=8, speculation=spec)
    wide = _dep("vllm", tp=8, ep=8, attention_dp=True, speculation=spec)
    for dep in (narrow, wide):
        verify, once = _verify_per_position(dep)
        assert once <= verify <= 4 * once * (1 + 1e-9)
    verify, once = _verify_per_position(wide)
    assert verify > once  # 128 heads a rank: FLOP-bound, dearer per token
    assert np.isfinite(verify)
