"""The B200 NCCL tables are aiconfigurator's 2.27.5 sweep (scripts/extract_nccl_allreduce.py TABLES): its
"2.27.3" folder holds 2.29.2's rows, whose all-gather and reduce-scatter of 16-32 MB on 8 GPUs take about twice
as long; TensorRT-LLM 1.0's stack ran NCCL 2.27.5 (issue 31, trtmoe46)."""

from __future__ import annotations

import numpy as np

from autotune.cost.comm import GroupSpan
from autotune.cost.serving_nccl import nccl_tables, serving_nccl_s
from autotune.spec.hardware_data import load_cluster


def test_the_b200_tables_are_a_set_measured_with_the_version_its_folder_names():
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        table = nccl_tables(op)[("dgx-b200", 8)]
        assert table.nccl_version == "2.27.5" and "b200_sxm/comm/nccl/2.27.5/" in table.source
        if op != "all_reduce":  # the collectives' source states the rows' own version column
            assert "version column 2.27.5" in table.source


def test_a_16_mib_reduce_scatter_on_eight_b200_takes_the_2_27_5_time():
    """8M BF16 elements (16 MiB) on 8 B200: 52.3 us in the 2.27.5 set, 96.7 us in the 2.29.2 rows shipped before."""
    seconds = serving_nccl_s("reduce_scatter", np.array([16 * 2.0**20]), GroupSpan(8, 1), load_cluster("dgx-b200"))[0]
    assert 45e-6 < seconds < 60e-6
