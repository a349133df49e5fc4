"""Fused attention's speed falls with the head width below 128 (cost/compute.py attention_head_dim_speed)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.compute import attention_head_dim_speed, block_times
from autotune.errors import AutotuneError
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset


def _attention_s(table, device, micro_batch=8.0) -> tuple[float, float]:
    times = block_times(table, device, "bf16", micro_batch, 1, 1, False)
    i = table.names.index("attention")
    return float(np.ravel(times.fwd_ops_s)[i]), float(np.ravel(times.bwd_ops_s)[i])


def test_speed_is_the_device_figure_at_64_one_at_128_and_between_in_log2():
    device = load_cluster("dgx-b200").device
    s64 = device.attention_head_dim_64_speed
    assert s64 < 1.0
    assert attention_head_dim_speed(device, 64) == pytest.approx(s64)
    assert attention_head_dim_speed(device, 128) == 1.0
    assert attention_head_dim_speed(device, 192) == 1.0  # MLA's query/key width: no correction above 128
    assert attention_head_dim_speed(device, 32) == pytest.approx(s64)  # held below the measured width
    assert attention_head_dim_speed(device, 96) == pytest.approx(s64 + (1 - s64) * np.log2(1.5))


def test_a_head_dim_64_attention_runs_slower_per_flop_than_the_same_work_at_128():
    device = load_cluster("dgx-h100").device
    table = model_tables(load_preset("gpt-oss-120b"), 4096, 2, "flash").layer
    i = table.names.index("attention")
    assert table.head_dim[i] == 64
    at_128 = replace(table, head_dim=np.where(np.arange(len(table)) == i, 128.0, table.head_dim))
    fwd64, bwd64 = _attention_s(table, device)
    fwd128, bwd128 = _attention_s(at_128, device)
    # compute-bound at this size: time scales with seconds per FLOP, i.e. 1 / speed
    assert fwd64 / fwd128 == pytest.approx(1 / device.attention_head_dim_64_speed, rel=0.02)
    assert bwd64 > bwd128


def test_a_device_without_the_figure_leaves_attention_unchanged():
    cpu = load_cluster("cpu").device
    assert cpu.attention_head_dim_64_speed == 1.0
    assert attention_head_dim_speed(cpu, 64) == 1.0


def test_every_shipped_gpu_states_where_its_figure_comes_from():
    for cluster in ("dgx-a100-80gb", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72",
                    "grand-teton-h100"):
        device = load_cluster(cluster).device
        assert device.attention_head_dim_64_speed < 1.0, cluster
        assert "head dim 64" in device.attention_head_dim_source, cluster


def test_an_out_of_range_figure_is_refused_naming_the_field():
    device = load_cluster("dgx-h100").device
    with pytest.raises(AutotuneError) as err:
        replace(device, attention_head_dim_64_speed=1.5)
    assert err.value.field == "device.attention_head_dim_64_speed"


def test_a_kernel_that_pads_the_head_does_the_padded_work():
    device = replace(load_cluster("dgx-h200").device, attention_head_dim_tile=64)
    s64 = device.attention_head_dim_64_speed
    assert attention_head_dim_speed(device, 80) == pytest.approx(80 / 128)  # run at 128's speed, 80 of 128 useful
    assert attention_head_dim_speed(device, 96) == pytest.approx(96 / 128)
    assert attention_head_dim_speed(device, 64) == pytest.approx(s64)  # a whole tile: the device's figure
    assert attention_head_dim_speed(device, 128) == 1.0
    assert attention_head_dim_speed(device, 136) == pytest.approx(136 / 192)


def test_the_eager_runtimes_pad_heads_on_hopper_only():
    from autotune.cost.runtime_kernels import runtime_cluster
    from autotune.spec.runtime import load_runtime
    for name in ("torch", "transformers"):
        runtime = load_runtime(name)
        assert runtime_cluster(load_cluster("dgx-h200"), runtime).device.attention_head_dim_tile == 64
        assert runtime_cluster(load_cluster("dgx-a100-80gb"), runtime).device.attention_head_dim_tile == 0
    assert runtime_cluster(load_cluster("dgx-h200"), load_runtime("megatron")).device.attention_head_dim_tile == 0
    with pytest.raises(AutotuneError, match="attention_head_dim_tile"):
        load_runtime("torch").with_changes(attention_head_dim_tile=(("hopper", 60),))
