"""FP8 checkpoints with 128x128 weight-block scales (DeepSeek-V3/R1) on Hopper: serving engines run them
with block-scale GEMMs, priced at the device's fp8_block fits (regressions.serving_gemm*.fp8_block,
serving_moe_gemm*.fp8_block); per-tensor FP8 models and Blackwell NVFP4 keep their fits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.cost.serving_step import ReplicaShape, serving_cluster, step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.hf_config import model_from_hf_dict
from autotune.spec.presets import resolve_model

FP8 = dict(weight_dtype="fp8", kv_bytes=1.0, max_tokens=8192, max_sampled=1)


@pytest.mark.parametrize(("fit", "linear", "moe"), [("linear", "serving_gemm", "serving_moe_gemm"),
                                                    ("vllm", "serving_gemm_vllm", "serving_moe_gemm_vllm"),
                                                    ("sglang", "serving_gemm_sglang", "serving_moe_gemm_sglang")])
@pytest.mark.parametrize("name", ["dgx-h100", "dgx-h200"])
def test_block_scaled_fp8_takes_the_engines_block_fits_on_hopper(name, fit, linear, moe):
    cluster = load_cluster(name)
    served = serving_cluster(cluster, fit, True).device
    assert served.regression("gemm", "fp8") is cluster.device.compute[(linear, "fp8_block")]
    assert served.compute[("expert_gemm", "fp8")] is cluster.device.compute[(moe, "fp8_block")]
    per_tensor = serving_cluster(cluster, fit, False)  # per-tensor FP8: the GEMM sweep's fit
    assert per_tensor.device.regression("gemm", "fp8") is cluster.device.regression("gemm", "fp8")
    assert ("expert_gemm", "fp8") not in per_tensor.device.compute


def test_deepseek_presets_are_block_scaled_and_others_not():
    assert resolve_model("deepseek-v3").fp8_block_scaled and resolve_model("kimi-k2").fp8_block_scaled
    assert not resolve_model("llama3-70b").fp8_block_scaled


def test_hf_config_weight_block_size_marks_the_checkpoint_block_scaled():
    with open("tests/data/hf_configs/deepseek-v3.json") as f:
        config = json.load(f)
    assert not model_from_hf_dict(config).fp8_block_scaled
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    assert model_from_hf_dict(config).fp8_block_scaled


def test_deepseek_fp8_steps_slower_than_per_tensor_on_h200():
    """The same DeepSeek-V3 replica (TP8/EP8 on one H200 node) with its block-scaled checkpoint prices an
    8192-token prefill step slower than if its FP8 were per-tensor, under every engine's fits (at a
    few tokens the block fits' measured intercepts, 11-25 us, can price it faster than the sweep's 21 us)."""
    block = resolve_model("deepseek-v3")
    tensor = block.with_changes(fp8_block_scaled=False)
    cluster, shape = load_cluster("dgx-h200").for_gpus(8), ReplicaShape(tp=8, ep=8)
    for fit in ("linear", "vllm", "sglang"):
        slow = step_model(block, cluster, shape, nvfp4_gemm_fit=fit, **FP8)
        fast = step_model(tensor, cluster, shape, nvfp4_gemm_fit=fit, **FP8)
        assert slow.linear_s[8192] > 1.05 * fast.linear_s[8192]
        assert slow.weight_bytes_per_gpu == fast.weight_bytes_per_gpu


def test_per_tensor_fp8_and_blackwell_nvfp4_unchanged():
    """A per-tensor FP8 model on Hopper and a block-scaled model served at NVFP4 on Blackwell price as
    they would without the flag."""
    llama = resolve_model("llama3-70b")
    h100 = load_cluster("dgx-h100").for_gpus(4)
    assert np.array_equal(step_model(llama, h100, ReplicaShape(tp=4), nvfp4_gemm_fit="linear", **FP8).linear_s,
                          step_model(llama, h100, ReplicaShape(tp=4), nvfp4_gemm_fit="sweep", **FP8).linear_s)
    block = resolve_model("deepseek-v3")
    b200, shape = load_cluster("dgx-b200").for_gpus(8), ReplicaShape(tp=8, ep=8)
    kw = dict(FP8, weight_dtype="nvfp4")
    assert np.array_equal(step_model(block, b200, shape, nvfp4_gemm_fit="linear", **kw).linear_s,
                          step_model(block.with_changes(fp8_block_scaled=False), b200, shape, nvfp4_gemm_fit="linear", **kw).linear_s)
