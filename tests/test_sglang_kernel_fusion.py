"""SGLang's fused add + RMSNorm (ServingEngine.residual_norm_fusion): a decoder layer's two residual adds run
inside the next RMSNorm's kernel, so a decode step is shorter by their launches and a long prompt chunk keeps
most of their bytes; an engine whose all-reduce runs the adds (TensorRT-LLM) is not charged twice."""

from __future__ import annotations

import numpy as np

from autotune.cost.serving_ops import fused_residual_adds
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def test_every_sglang_preset_fuses_the_residual_add_into_its_norm():
    for name in ("sglang", "sglang-0.4", "sglang-0.3"):
        assert load_runtime(name).serving.residual_norm_fusion
    assert not load_runtime("tensorrt-llm-0.17").serving.residual_norm_fusion


def test_the_adds_lose_their_launch_and_a_read():
    layer = model_tables(resolve_model("llama3-8b"), 1, 2, "flash").layer
    fused = fused_residual_adds(layer)
    adds = np.array([n in ("attn_residual", "ffn_residual") for n in layer.names])
    assert adds.sum() == 2 and (fused.kernels[adds] == 0).all() and (fused.kernels[~adds] == layer.kernels[~adds]).all()
    assert (fused.in_bytes[adds] == 0.5 * layer.in_bytes[adds]).all() and (fused.out_bytes == layer.out_bytes).all()


def test_a_decode_step_is_shorter_by_the_adds_and_a_fused_allreduce_is_not_charged_twice():
    model, cluster = resolve_model("llama3-70b"), load_cluster("dgx-h100").for_gpus(4)
    kw = dict(weight_dtype="fp8", kv_bytes=1.0, max_tokens=8, max_sampled=8)
    plain = step_model(model, cluster, ReplicaShape(tp=4), **kw)
    fused = step_model(model, cluster, ReplicaShape(tp=4), residual_norm_fusion=True, **kw)
    saved = plain.linear_s[1] - fused.linear_s[1]
    assert 0.0 < saved < 0.05 * plain.linear_s[1]  # two small launches a layer, no more
    both = step_model(model, cluster, ReplicaShape(tp=4), allreduce_norm_fusion=True, residual_norm_fusion=True, **kw)
    ar_only = step_model(model, cluster, ReplicaShape(tp=4), allreduce_norm_fusion=True, **kw)
    assert both.linear_s[1] == ar_only.linear_s[1]
