"""Cost-model formulas against hand-computed cases."""

import math

import numpy as np
import pytest

from autotune.cost.comm import GroupSpan, collective_time_s, level_time_s
from autotune.cost.compute import block_times
from autotune.cost.memory import sharded_state_bytes, state_bytes_per_param
from autotune.cost.mesh import group_spans
from autotune.cost.pipeline import bubble_s, inflight_microbatches, pipeline_time_s
from autotune.cost.stage import overlapped_exposed_s
from autotune.graph.operators import Operator, _chain
from autotune.graph.table import OpTable
from autotune.spec.hardware import ClusterSpec, DeviceProfile, LinkLevel, MemoryTier, Regression

LINK = LinkLevel(name="l", latency_s=5e-6, alpha_s=1e-6, beta_s_per_byte=1 / 100e9)
SLOW = LinkLevel(name="ib", latency_s=5e-6, alpha_s=2e-6, beta_s_per_byte=1 / 25e9)


def toy_device(efficiency=1.0):
    return DeviceProfile(
        name="toy", kind="gpu", peak_flops={"bf16": 100e12},
        tiers=(MemoryTier(name="hbm", capacity_bytes=80e9, bandwidth_bytes_per_s=2e12, latency_s=0),),
        compute={("gemm", "bf16"): Regression(latency_s=10e-6, seconds_per_unit=1 / 50e12)},
        memory=Regression(latency_s=2e-6, seconds_per_unit=1 / 1e12), reserved_bytes=1e9,
        provenance="test", kernel_efficiency=efficiency)


def test_roofline_takes_the_slower_regression():
    gemm = Operator(name="g", kind="gemm", flops=1e12, model_flops=1e12, act_in_bytes=1e9, act_out_bytes=1e9,
                    weight_bytes=0, params=0, saved_bytes=0, sharding="column", bwd_flops_factor=2, bwd_kernels=2)
    copy = Operator(name="c", kind="elementwise", flops=0, model_flops=0, act_in_bytes=3e9, act_out_bytes=1e9,
                    weight_bytes=0, params=0, saved_bytes=0, sharding="replicated", bwd_bytes_factor=1.5)
    table = OpTable.from_graph(_chain([gemm, copy]))
    bt = block_times(table, toy_device(), "bf16", micro_batch=1, tp=1, cp=1, sequence_parallel=False)
    # gemm: max(10us + 1e12/50e12, 2us + 2e9/1e12) = 20.01 ms; copy: 2us + 4e9/1e12 = 4.002 ms
    assert bt.fwd_ops_s == pytest.approx([0.02001, 0.004002])
    # backward: gemm 2 kernels x 10us + 2e12/50e12; copy 2us + 6e9/1e12
    assert bt.bwd_ops_s == pytest.approx([0.04002, 0.006002])
    # tp=2 halves the gemm's FLOPs and its split output; the replicated copy stays whole without SP
    bt2 = block_times(table, toy_device(), "bf16", micro_batch=1, tp=2, cp=1, sequence_parallel=False)
    assert bt2.fwd_ops_s == pytest.approx([0.01001, 0.004002])
    bt3 = block_times(table, toy_device(), "bf16", micro_batch=2, tp=2, cp=1, sequence_parallel=True)
    assert bt3.fwd_ops_s == pytest.approx([0.02001, 0.004002])  # SP halves the copy, batch doubles it
    slow = block_times(table, toy_device(0.5), "bf16", micro_batch=1, tp=1, cp=1, sequence_parallel=False)
    assert slow.fwd_ops_s == pytest.approx(2 * bt.fwd_ops_s)


def test_block_times_broadcast_over_choices():
    gemm = Operator(name="g", kind="gemm", flops=1e12, model_flops=1e12, act_in_bytes=0, act_out_bytes=0,
                    weight_bytes=0, params=0, saved_bytes=0, sharding="column")
    table = OpTable.from_graph(_chain([gemm]))
    bt = block_times(table, toy_device(), "bf16", np.array([1, 2, 4]), np.array([1, 2, 4]), 1, False)
    assert bt.fwd_s == pytest.approx([0.02001] * 3)


def test_ring_and_tree_all_reduce():
    n, nbytes = 8, 1e9
    ring = 5e-6 + 2 * 7 * 1e-6 + 2 * 7 / 8 * nbytes / 100e9
    assert level_time_s("all_reduce", nbytes, n, LINK) == pytest.approx(ring)
    small = 1e3  # the tree's log2(n) steps win for small messages
    tree = 5e-6 + 2 * 3 * 1e-6 + 2 * small / 100e9
    assert level_time_s("all_reduce", small, n, LINK) == pytest.approx(tree)
    assert level_time_s("all_gather", nbytes, n, LINK) == pytest.approx(5e-6 + 7e-6 + 7 / 8 * nbytes / 100e9)
    assert level_time_s("send_recv", nbytes, 2, LINK) == pytest.approx(5e-6 + 1e-6 + nbytes / 100e9)
    assert level_time_s("all_reduce", nbytes, 1, LINK) == 0.0


def test_two_level_ring_is_limited_by_the_slower_of_nvlink_and_the_nodes_nics():
    cluster = ClusterSpec(name="c", device=toy_device(), gpus_per_node=8, intra_node=LINK, inter_node=SLOW,
                          host_link=LINK)
    nbytes = 1e9
    # 4 nodes x 8: per byte max(1/100e9, 1/(8 x 25e9)) = 1/200e9 -> NVLink hop is the bottleneck
    span = GroupSpan(8, 4)
    steps = (32 - 4) * 1e-6 + 3 * 2e-6
    expected = 5e-6 + 2 * steps + 2 * 31 / 32 * nbytes / 100e9
    assert collective_time_s("all_reduce", nbytes, span, cluster) == pytest.approx(expected)
    # 2 members per node share 2 NICs: 1/50e9 per byte
    span2 = GroupSpan(2, 4)
    expected2 = 5e-6 + (8 - 4) * 1e-6 + 3 * 2e-6 + 7 / 8 * nbytes / 50e9
    assert collective_time_s("reduce_scatter", nbytes, span2, cluster) == pytest.approx(expected2)


def test_group_spans_follow_the_mesh_order():
    spans = group_spans("tp-cp-dp", 8, 1, 4, 8)
    assert spans["tp"] == GroupSpan(8, 1) and spans["dp"] == GroupSpan(1, 4)
    spans = group_spans("dp-tp-cp", 8, 1, 4, 8)  # DP innermost: 4 DP ranks per node, TP across nodes
    assert spans["dp"] == GroupSpan(4, 1) and spans["tp"] == GroupSpan(2, 4)
    assert group_spans("tp-cp-dp", 2, 2, 2, 8)["dp_cp"] == GroupSpan(4, 1)


def test_seed_bucket_model_and_its_optimal_bucket():
    # Seed 002: when computing a bucket's gradients takes as long as communicating it, the overhead
    # after backward is n_b o + s/(w n_b), minimal at bucket size sqrt(s w o).
    s, w, o = 4e9, 50e9, 1e-3
    collective = lambda nbytes: o + nbytes / w  # noqa: E731
    window = s / w  # backward takes as long as sending everything
    for n_b in (1, 4, 16):  # share 0: the seed's model, no compute slowdown beside the collective
        exposed = overlapped_exposed_s(s, collective, window, s / n_b, True, share=0.0)
        assert exposed == pytest.approx(n_b * o + s / (w * n_b))
        # with contention the compute beside the hidden buckets slows by 18.9% (Lee et al. 2025)
        hidden = n_b * (o + s / (w * n_b)) - exposed
        contended = overlapped_exposed_s(s, collective, window, s / n_b, True)
        assert contended == pytest.approx(exposed + 0.189 * min(hidden, window))
    best = overlapped_exposed_s(s, collective, window, 0.0, True, share=0.0)  # default: sqrt(s w o)
    assert best == pytest.approx(min(n * o + s / (w * n) for n in range(1, 200)), rel=0.01)
    assert math.sqrt(s * w * o) == pytest.approx(s / round(s / math.sqrt(s * w * o)), rel=0.05)
    assert overlapped_exposed_s(s, collective, window, 0.0, False) == pytest.approx(o + s / w)


def test_pipeline_schedules():
    assert pipeline_time_s([1.0, 2.0, 3.0], 4, "1f1b") == pytest.approx(6 + 3 * 3)
    assert pipeline_time_s([1.0, 2.0, 3.0], 4, "gpipe") == pytest.approx(15)
    # interleaved, 4 equal stages of t=2, 8 micro-batches, v=2: B t + (S-1) t / v
    assert pipeline_time_s([2.0] * 4, 8, "interleaved", 2) == pytest.approx(8 * 2 + 3 * 2 / 2)
    assert bubble_s([2.0] * 4, 8, "1f1b") == pytest.approx(3 * 2)
    assert inflight_microbatches(0, 4, 8, "1f1b") == 4
    assert inflight_microbatches(3, 4, 8, "1f1b") == 1
    assert inflight_microbatches(0, 4, 2, "1f1b") == 2
    assert inflight_microbatches(2, 4, 8, "gpipe") == 8
    assert inflight_microbatches(0, 4, 16, "interleaved", 2) == pytest.approx(4 + 3 / 2)


def test_mixed_precision_state_bytes_and_zero_sharding():
    per = state_bytes_per_param("bf16")
    assert per.weights + per.gradients + per.master + per.moments == 18  # Megatron: 2+4+4+8
    assert sum(vars(state_bytes_per_param("fp32")).values()) == 16
    p, n = 1e9, 8
    assert sharded_state_bytes(p, "bf16", 0, n) == (2e9, 4e9, 12e9)
    assert sharded_state_bytes(p, "bf16", 1, n) == (2e9, 4e9, 12e9 / n)
    assert sharded_state_bytes(p, "bf16", 2, n) == (2e9, 4e9 / n, 12e9 / n)
    assert sharded_state_bytes(p, "bf16", 3, n) == (2e9 / n, 4e9 / n, 12e9 / n)
