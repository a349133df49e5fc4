"""vLLM's MXFP4 MoE on Hopper: Marlin (padded weights, its large-batch ceiling) through 0.11, OpenAI's triton_kernels
matmul_ogs from the release whose wheel ships them (0.13.0; vllm/third_party/triton_kernels) unless the row sets
VLLM_MXFP4_USE_MARLIN=1; priced as the BF16 fit's padded tiles on the experts' MXFP4 bytes, which aiconfigurator's
measured vLLM 0.24.0 layer (h100_sxm moe_perf.parquet, vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic)
matches; other GPUs and engines unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest

import autotune.cost.serving_step as ss
from autotune.calibrate.serving_flags import mxfp4_flags
from autotune.cost.serving_eval import ServingDeployment, _mxfp4_kernel, replica_step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def test_the_release_and_the_notes_pick_the_kernel():
    old, new, sglang = (load_runtime(n).serving for n in ("vllm-0.9.2", "vllm-0.14", "sglang"))
    assert (old.mxfp4_sm90_moe, new.mxfp4_sm90_moe, load_runtime("vllm").serving.mxfp4_sm90_moe) == ("marlin", "triton", "triton")
    assert mxfp4_flags(old, "0.10.2", "") == {}
    assert mxfp4_flags(old, "v0.13.0 or later", "") == {"mxfp4_sm90_moe": "triton"}
    assert mxfp4_flags(old, "0.13.0", "VLLM_MXFP4_USE_MARLIN=1; vllm serve") == {}
    assert mxfp4_flags(new, "0.14.0", "env VLLM_MXFP4_USE_MARLIN=1") == {"mxfp4_sm90_moe": "marlin"}
    assert mxfp4_flags(sglang, "0.5.9", "VLLM_MXFP4_USE_MARLIN=1") == {}


def _dep(runtime: str, cluster: str = "dgx-h100", tp: int = 1) -> ServingDeployment:
    return ServingDeployment(model=resolve_model("gpt-oss-120b"), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                             tp=tp, weight_dtype="mxfp4")


def _experts_per_layer(dep: ServingDeployment):
    """The routed experts' seconds a layer, for 0..8192 tokens."""
    with_experts = replica_step_model(dep, max_tokens=8192, max_sampled=8).linear_s
    original = ss.experts_s
    try:
        ss.experts_s = lambda *a, **k: 0 * a[7]
        ss._step_model.cache_clear()
        without = replica_step_model(dep, max_tokens=8192, max_sampled=8).linear_s
    finally:
        ss.experts_s = original
        ss._step_model.cache_clear()
    return (with_experts - without) / dep.model.num_layers


# aiconfigurator @095f58a5 h100_sxm/moe/vllm/0.24.0/moe_perf.parquet, gpt-oss-120b's layer (2880 x 2880, 128 experts,
# top 4), moe_ep 1, balanced routing: median latency (us) by moe_tp and tokens
_MEASURED_US = {1: {1: 62.9, 64: 689.1, 1024: 856.2, 8192: 2930.9}, 2: {1: 48.3, 64: 392.4, 1024: 487.1, 8192: 1676.8},
                8: {1: 38.9, 64: 134.9, 1024: 180.6, 8192: 605.2}}


@pytest.mark.parametrize("tp", sorted(_MEASURED_US))
def test_the_triton_layer_is_priced_near_its_measurement(tp):
    priced = _experts_per_layer(_dep("vllm-0.14", tp=tp))
    for tokens, us in _MEASURED_US[tp].items():
        assert priced[tokens] * 1e6 == pytest.approx(us, rel=0.35), tokens


def test_triton_drops_marlins_padding_and_large_batch_ceiling():
    marlin, triton = _dep("vllm-0.9.2"), _dep("vllm-0.14")
    m, t = _experts_per_layer(marlin), _experts_per_layer(triton)
    assert t[8192] < 0.6 * m[8192]  # Marlin's ceiling (377 TFLOP/s) against the BF16 fit
    assert t[1] < m[1]  # 2880 x 2880 experts read unpadded, not as 3072 x 2944
    weights = [replica_step_model(d, max_tokens=1, max_sampled=1).weight_bytes_per_gpu for d in (marlin, triton)]
    assert weights[0] - weights[1] == pytest.approx(5.1 * 2**30, rel=0.1)  # Marlin's +5.1 GiB (vllm-0.9.toml)


def test_other_gpus_keep_their_kernels():
    a100 = replace(_dep("vllm-0.14"), cluster=load_cluster("dgx-a100-80gb"))
    assert _mxfp4_kernel(a100, a100.cluster) == "marlin"  # triton_kernels need SM 9.0+
    b200, b200_old = _dep("vllm-0.14", "dgx-b200", tp=8), _dep("vllm-0.9.2", "dgx-b200", tp=8)
    assert _experts_per_layer(b200)[4096] == pytest.approx(_experts_per_layer(b200_old)[4096])


# aiconfigurator @095f58a5 b200_sxm/moe/vllm/0.24.0/moe_perf.parquet, gpt-oss-120b's layer on FlashInfer's TRTLLM-Gen
# MXFP4 x BF16 kernel (vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic), moe_ep 1,
# balanced: median latency (us) by moe_tp and tokens
_B200_MEASURED_US = {1: {1: 31.2, 64: 382.1, 1024: 682.9, 8192: 3016.6}, 8: {1: 19.6, 64: 88.8, 1024: 156.3, 8192: 641.8}}


@pytest.mark.parametrize("tp", sorted(_B200_MEASURED_US))
def test_blackwells_bf16_activation_kernel_is_priced_near_its_measurement(tp):
    priced = _experts_per_layer(_dep("vllm-0.9.2", "dgx-b200", tp=tp))
    for tokens, us in _B200_MEASURED_US[tp].items():
        assert priced[tokens] * 1e6 == pytest.approx(us, rel=0.4), tokens


def test_the_clamped_activation_runs_fused():
    """GPT-OSS's clamp inside the engines' activation kernel: its routed rows move what a plain SwiGLU's move."""
    gpt = _dep("vllm-0.14")
    plain = replace(gpt, model=gpt.model.with_changes(expert_act_clamp=0.0))
    assert _experts_per_layer(gpt)[8192] == pytest.approx(_experts_per_layer(plain)[8192])
