"""TensorRT-LLM's own TP all-reduce (ServingEngine.tp_allreduce "trtllm_auto"): its AUTO strategy runs
the Lamport MIN_LATENCY kernels for small inputs inside an NVLink node (2 ranks up to the 16e6-byte
workspace; above 2 ranks up to 128 tokens) and NCCL else; the kernels' times are the cluster's measured
intra_node.collectives.trtllm_all_reduce fits (aiconfigurator's TensorRT-LLM rows), NCCL's its measured
nccl-tests table (cost/serving_nccl.py, tests/test_serving_nccl_table.py)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.serving_collectives import TRTLLM_ALL_REDUCE, tp_all_reduce_s
from autotune.cost.serving_nccl import serving_nccl_all_reduce_s
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine

HIDDEN_BYTES = 7168 * 2  # one DeepSeek-V3 token's BF16 activations


def test_the_1_0_preset_runs_its_own_all_reduce_and_others_nccl():
    assert load_runtime("tensorrt-llm-1.0").serving.tp_allreduce == "trtllm_auto"
    assert load_runtime("tensorrt-llm-0.17").serving.tp_allreduce == "nccl"
    assert load_runtime("vllm").serving.tp_allreduce == "nccl"
    with pytest.raises(AutotuneError, match="tp_allreduce"):
        ServingEngine(engine="vllm", version="0.9", tp_allreduce="trtllm_auto")
    with pytest.raises(AutotuneError, match="tp_allreduce"):
        ServingEngine(engine="tensorrt-llm", version="1.0", tp_allreduce="oneshot")


@pytest.mark.parametrize("name", ["dgx-b200", "dgx-h100", "dgx-h200"])
def test_measured_kernel_below_the_rule_nccl_above(name):
    cluster = load_cluster(name)
    span = GroupSpan(8, 1)
    tokens = np.array([1.0, 8.0, 128.0, 129.0, 4096.0])
    act = tokens * HIDDEN_BYTES
    nccl = serving_nccl_all_reduce_s(act, span, cluster)
    auto = tp_all_reduce_s(act, tokens, span, cluster, "trtllm_auto")
    fit = cluster.intra_node.collectives[(TRTLLM_ALL_REDUCE, 8)]
    # up to 128 tokens the Lamport kernel's fit: one token in 3.5-6 us, under NCCL's 15-26 us measured
    np.testing.assert_allclose(auto[:3], fit.latency_s + act[:3] * fit.seconds_per_unit)
    assert 3e-6 < auto[0] < 6.5e-6 < nccl[0]
    np.testing.assert_array_equal(auto[3:], nccl[3:])  # beyond: NCCL
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, span, cluster, "nccl"), nccl)


def test_two_ranks_stay_on_the_kernel_up_to_the_workspace():
    cluster = load_cluster("dgx-b200")
    tokens = np.array([4096.0, 8192.0])
    act = tokens * 8192 * 2  # 67 MB / 134 MB: past the 16e6-byte workspace
    small = np.array([512.0]) * 8192 * 2  # 8.4 MB: inside it, 512 tokens
    span = GroupSpan(2, 1)
    fit = cluster.intra_node.collectives[(TRTLLM_ALL_REDUCE, 2)]
    assert tp_all_reduce_s(small, np.array([512.0]), span, cluster, "trtllm_auto")[0] == pytest.approx(
        fit.latency_s + small[0] * fit.seconds_per_unit)
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, span, cluster, "trtllm_auto"),
                                  serving_nccl_all_reduce_s(act, span, cluster))


def test_groups_without_a_measurement_or_across_nodes_take_nccl():
    gb200 = load_cluster("gb200-nvl72")  # 2 and 4 ranks measured; 8 span two 4-GPU trays, which AUTO leaves to NCCL
    tokens = np.array([1.0, 16.0])
    act = tokens * HIDDEN_BYTES
    span = GroupSpan(8, 1)
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, span, gb200, "trtllm_auto"),
                                  collective_time_s("all_reduce", act, span, gb200))
    b200 = load_cluster("dgx-b200")
    across = GroupSpan(8, 2)
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, across, b200, "trtllm_auto"),
                                  collective_time_s("all_reduce", act, across, b200))


def test_batch_one_decode_step_is_shorter_by_the_all_reduces():
    """DeepSeek-R1 NVFP4 on 8 B200, TP8: 61 layers x 2 all-reduces, each ~4 us on the Lamport kernel against
    NCCL's ~26 us measured at one token."""
    model, cluster = resolve_model("deepseek-v3"), load_cluster("dgx-b200").for_gpus(8)
    kw = dict(weight_dtype="nvfp4", kv_bytes=2.0, max_tokens=512, max_sampled=8, nvfp4_gemm_fit="linear")
    nccl = step_model(model, cluster, ReplicaShape(tp=8, ep=4), **kw)
    auto = step_model(model, cluster, ReplicaShape(tp=8, ep=4), tp_allreduce="trtllm_auto", **kw)
    saved = nccl.linear_s[1] - auto.linear_s[1]
    span, one = GroupSpan(8, 1), np.array([HIDDEN_BYTES])
    per_all_reduce = (serving_nccl_all_reduce_s(one, span, cluster) - tp_all_reduce_s(
        one, np.array([1.0]), span, cluster, "trtllm_auto"))[0]
    assert 15e-6 < per_all_reduce < 30e-6
    assert saved == pytest.approx(2 * 61 * per_all_reduce, rel=1e-6)
    assert auto.linear_s[512] == nccl.linear_s[512]  # a 512-token step: NCCL either way
