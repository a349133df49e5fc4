"""NCCL's all-reduce in serving steps from NVIDIA's aiconfigurator nccl-tests sweeps (autotune/data/nccl_all_reduce.toml,
cost/serving_nccl.py): the measured time inside one node, interpolated in bytes; comm.py's formula outside a table's
sizes, for group sizes and clusters without one, and across nodes; vLLM's and SGLang 0.3/0.4's own all-reduce
(under 8 MiB) keeps the formula (SGLang 0.5.6+: tests/test_serving_sglang_allreduce.py); training's collectives
keep the formula."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.serving_collectives import engine_tp_allreduce, tp_all_reduce_s
from autotune.cost.serving_nccl import nccl_tables, serving_nccl_all_reduce_s
from autotune.spec.hardware_data import cluster_names, load_cluster


def test_every_table_names_a_preset_cluster_its_source_and_nccl_version():
    assert {name for name, _ in nccl_tables()} >= {"dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72"}
    for (name, gpus), table in nccl_tables().items():
        assert name in cluster_names()
        assert gpus <= load_cluster(name).gpus_per_node
        assert "aiconfigurator @095f58a5" in table.source and table.nccl_version in table.source
        # one NVLink node's all-reduce: microseconds at small sizes, rising with the message
        assert 3e-6 < table.seconds[0] < 40e-6 and table.seconds[-1] > 20 * table.seconds[0]


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-b200"])
def test_measured_sizes_come_back_and_between_them_a_straight_line(name):
    cluster, span = load_cluster(name), GroupSpan(4, 1)
    table = nccl_tables()[(name, 4)]
    grid = np.array(table.nbytes[3:8])
    np.testing.assert_allclose(serving_nccl_all_reduce_s(grid, span, cluster), table.seconds[3:8])
    middle = (grid[:-1] + grid[1:]) / 2
    np.testing.assert_allclose(serving_nccl_all_reduce_s(middle, span, cluster),
                               (np.array(table.seconds[3:7]) + table.seconds[4:8]) / 2)


def test_mid_sizes_on_four_h100_are_slower_than_the_formula():
    """The finding behind the table: 467 tokens x 8192 x BF16 on 4 H100 measure ~57-60 us; the formula says ~41."""
    cluster, span = load_cluster("dgx-h100"), GroupSpan(4, 1)
    act = np.array([467 * 8192 * 2.0])
    measured = serving_nccl_all_reduce_s(act, span, cluster)[0]
    assert 55e-6 < measured < 62e-6
    assert measured > 1.25 * collective_time_s("all_reduce", act, span, cluster)[0]


def test_outside_the_tables_the_formula():
    h100 = load_cluster("dgx-h100")
    table = nccl_tables()[("dgx-h100", 8)]
    outside = np.array([table.nbytes[0] / 2, table.nbytes[-1] * 2])
    for act, span, cluster in [(outside, GroupSpan(8, 1), h100),  # past either end of the sweep
                               (np.array([1e6]), GroupSpan(8, 2), h100),  # across nodes
                               (np.array([1e6]), GroupSpan(6, 1), h100),  # a group size not swept
                               (np.array([1e6]), GroupSpan(8, 1), load_cluster("dgx-a100-80gb"))]:  # no table
        np.testing.assert_array_equal(serving_nccl_all_reduce_s(act, span, cluster),
                                      collective_time_s("all_reduce", act, span, cluster))


def test_vllm_and_sglang_keep_their_own_all_reduce_below_8_mib_and_take_nccl_above():
    assert engine_tp_allreduce("vllm", "nccl") == engine_tp_allreduce("sglang", "nccl") == "custom_ar"
    assert engine_tp_allreduce("tensorrt-llm", "nccl") == "nccl"
    assert engine_tp_allreduce("tensorrt-llm", "trtllm_auto") == "trtllm_auto"
    cluster, span = load_cluster("dgx-h200"), GroupSpan(8, 1)
    act = np.array([64 * 1024.0, 8 * 1024 * 1024 - 16, 8 * 1024 * 1024, 64e6])
    tokens = act / (7168 * 2)
    custom = tp_all_reduce_s(act, tokens, span, cluster, "custom_ar")
    np.testing.assert_array_equal(custom[:2], collective_time_s("all_reduce", act[:2], span, cluster))
    np.testing.assert_array_equal(custom[2:], serving_nccl_all_reduce_s(act[2:], span, cluster))
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, span, cluster, "nccl"),
                                  serving_nccl_all_reduce_s(act, span, cluster))
    across = GroupSpan(8, 2)  # CustomAllreduce is off when the group leaves the node
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, across, cluster, "custom_ar"),
                                  collective_time_s("all_reduce", act, across, cluster))


def test_training_collectives_keep_the_formula():
    """comm.py prices training; the tables are read by the serving path only."""
    cluster = load_cluster("dgx-h100")
    assert ("all_reduce", 4) not in cluster.intra_node.collectives
    act = np.array([467 * 8192 * 2.0])
    assert collective_time_s("all_reduce", act, GroupSpan(4, 1), cluster)[0] < 45e-6
