"""vLLM's tuned fused-MoE configs (cost/moe_configs.py): an expert shape its release ships no config file for
runs the default tiles, priced at the device's serving_moe_gemm_vllm_untuned fit; shapes with a file, other
GPUs, block-scaled FP8 and engines without the table keep their pricing."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.moe_configs import untuned_experts, untuned_moe_shape
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model

STEP = dict(kv_bytes=2.0, max_tokens=8192, max_sampled=1, nvfp4_gemm_fit="vllm")


def test_file_names_as_vllm_spells_them():
    assert not untuned_moe_shape("0.11.0", "H100-SXM5-80GB", 128, 192, "bf16")  # E=128,N=192 ... H100 .json
    assert untuned_moe_shape("0.11.0", "H100-SXM5-80GB", 128, 192, "fp8")  # no fp8_w8a8 file for it
    assert untuned_moe_shape("0.11.0", "H100-SXM5-80GB", 128, 768, "bf16")
    assert not untuned_moe_shape("0.11.0", "H200-SXM-141GB", 128, 768, "bf16")
    assert not untuned_moe_shape("0.11.0", "B200", 128, 768, "bf16")  # a GPU the table does not list
    assert not untuned_moe_shape("", "H100-SXM5-80GB", 128, 768, "bf16")  # an engine without the table


def test_local_shape_follows_tp_and_ep():
    qwen = resolve_model("qwen3-235b-a22b")  # 128 experts of 1536
    assert not untuned_experts("0.11.0", "H100-SXM5-80GB", qwen, 8, 1, "bf16")  # E=128, N=192: tuned
    assert untuned_experts("0.11.0", "H100-SXM5-80GB", qwen, 8, 8, "bf16")  # E=16, N=1536: none
    assert not untuned_experts("0.11.0", "H100-SXM5-80GB", resolve_model("llama3-8b"), 1, 1, "bf16")


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_default_tiles_price_large_steps_slower_on_h100(dtype):
    model, cluster = resolve_model("qwen3-235b-a22b"), load_cluster("dgx-h100").for_gpus(8)
    shape = ReplicaShape(tp=8, ep=8)
    tuned = step_model(model, cluster, shape, weight_dtype=dtype, **STEP)
    default = step_model(model, cluster, shape, weight_dtype=dtype, moe_tuned_configs="0.11.0", **STEP)
    assert default.linear_s[8192] > 1.2 * tuned.linear_s[8192]
    assert default.weight_bytes_per_gpu == tuned.weight_bytes_per_gpu


@pytest.mark.parametrize(("name", "model", "dtype", "shape"), [
    ("dgx-h100", "qwen3-235b-a22b", "bf16", ReplicaShape(tp=8)),  # a shipped file
    ("dgx-h200", "deepseek-v3", "fp8", ReplicaShape(tp=8)),  # block-scaled FP8: its own fit either way
    ("dgx-b200", "qwen3-235b-a22b", "bf16", ReplicaShape(tp=8, ep=8))])  # a GPU the table does not list
def test_tuned_shapes_block_fp8_and_other_gpus_are_unchanged(name, model, dtype, shape):
    cluster, spec = load_cluster(name).for_gpus(8), resolve_model(model)
    plain = step_model(spec, cluster, shape, weight_dtype=dtype, **STEP)
    listed = step_model(spec, cluster, shape, weight_dtype=dtype, moe_tuned_configs="0.11.0", **STEP)
    assert np.array_equal(plain.linear_s, listed.linear_s)
