"""vLLM's expert parallelism without an all-to-all (cost/expert_map.py): each rank runs the experts'
activation, output zeroing and moe_sum on every routed row, so EP steps cost more than the rank's own
rows; expert TP, DP attention, other engines and the FP4 paths keep their pricing."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.expert_map import masked_rows_s
from autotune.cost.serving_ops import select_ops
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

STEP = dict(kv_bytes=2.0, max_tokens=8192, max_sampled=1, nvfp4_gemm_fit="vllm")


def _steps(model, cluster, shape, dtype):
    plain = step_model(model, cluster, shape, weight_dtype=dtype, **STEP)
    masked = step_model(model, cluster, shape, weight_dtype=dtype, moe_ep_masked_rows=True, **STEP)
    return plain, masked


@pytest.mark.parametrize("ep", [4, 8])
def test_ep_without_alltoall_prices_every_routed_row(ep):
    model, cluster = resolve_model("qwen3-235b-a22b"), load_cluster("dgx-h100").for_gpus(8)
    plain, masked = _steps(model, cluster, ReplicaShape(tp=8, ep=ep), "fp8")
    assert masked.linear_s[8192] > 1.02 * plain.linear_s[8192]
    assert np.all(masked.linear_s[1:] >= plain.linear_s[1:])
    assert masked.weight_bytes_per_gpu == plain.weight_bytes_per_gpu


def test_more_ranks_mask_more_rows():
    model, cluster = resolve_model("qwen3-235b-a22b"), load_cluster("dgx-h100").for_gpus(8)
    extra = {ep: np.subtract(*[s.linear_s[4096] for s in reversed(_steps(model, cluster, ReplicaShape(tp=8, ep=ep),
                                                                       "bf16"))]) for ep in (2, 8)}
    assert extra[8] > extra[2] > 0.0


@pytest.mark.parametrize("shape", [ReplicaShape(tp=8), ReplicaShape(tp=8, ep=8, attention_dp=True)])
def test_expert_tp_and_dp_attention_are_unchanged(shape):
    model, cluster = resolve_model("qwen3-235b-a22b"), load_cluster("dgx-h100").for_gpus(8)
    plain, masked = _steps(model, cluster, shape, "fp8")
    assert np.array_equal(plain.linear_s, masked.linear_s)


@pytest.mark.parametrize(("name", "model", "dtype"), [("dgx-b200", "qwen3-235b-a22b", "nvfp4"),
                                                      ("dgx-h100", "gpt-oss-120b", "mxfp4")])
def test_non_triton_moe_paths_are_unchanged(name, model, dtype):
    plain, masked = _steps(resolve_model(model), load_cluster(name).for_gpus(8), ReplicaShape(tp=8, ep=8), dtype)
    assert np.array_equal(plain.linear_s, masked.linear_s)


def test_masked_rows_grow_with_the_rows_the_rank_does_not_own():
    model, device = resolve_model("qwen3-235b-a22b"), load_cluster("dgx-h100").device
    tables = model_tables(model, 1, 2, "flash")
    moves = select_ops(tables.moe_layer, np.array([n in ("permute", "unpermute") for n in tables.moe_layer.names]))
    tokens = np.array([0.0, 1024.0, 8192.0])
    own = masked_rows_s(tables.experts, moves, device, device, "bf16", "bf16", tokens, tokens, 1,
                        model.hidden_size, model.num_experts_per_token)
    shared = masked_rows_s(tables.experts, moves, device, device, "bf16", "bf16", tokens, tokens / 8, 1,
                           model.hidden_size, model.num_experts_per_token)
    assert own[0] == shared[0] == 0.0
    assert np.all(shared[1:] > own[1:]) and shared[2] > shared[1]


def test_vllm_presets_say_so_and_other_engines_do_not():
    assert load_runtime("vllm").serving.moe_ep_masked_rows and load_runtime("vllm-0.9.2").serving.moe_ep_masked_rows
    assert not load_runtime("sglang").serving.moe_ep_masked_rows
    assert not load_runtime("tensorrt-llm-1.0").serving.moe_ep_masked_rows
