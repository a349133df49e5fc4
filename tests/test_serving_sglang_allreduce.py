"""SGLang's and vLLM's TP all-reduce as each release runs it (cost/serving_custom_ar.py): which kernel takes an input by
release, size, group size and GPU, its measured sweeps (data/engine_all_reduce.toml), and where SGLang's
FlashInfer all-reduce fusion runs and what it costs."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.calibrate.serving_rows import engine_runtime
from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.serving_collectives import tp_all_reduce_s
from autotune.cost.serving_custom_ar import FUSION_SUFFIX, sglang_fusion_on, sglang_release_allreduce, engine_tables
from autotune.cost.serving_nccl import serving_nccl_all_reduce_s
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import cluster_names, load_cluster
from autotune.spec.presets import resolve_model

MIB = 1024 * 1024
DSV3_TOKEN_BYTES = 7168 * 2


@pytest.mark.parametrize("version, kind, fusion", [
    ("0.5.6", "sglang_v1", "sm100"), ("0.5.7", "sglang_v1", "sm90_sm100"), ("0.5.11", "sglang_v1", "sm90_sm100"),
    ("0.5.12", "sglang_v2", "sm90_sm100"), ("0.5.14", "sglang_v2", "sm90_sm100")])
def test_a_release_picks_its_kernel_generation_and_fusion_rule(version, kind, fusion):
    engine = engine_runtime("sglang", version).serving
    assert (engine.tp_allreduce, engine.flashinfer_allreduce_fusion) == (kind, fusion)


def test_releases_before_the_measured_kernels_keep_the_old_pricing():
    assert sglang_release_allreduce("0.4.6") == {} and sglang_release_allreduce("main") == {}
    assert engine_runtime("sglang", "0.4.6").serving.tp_allreduce == "nccl"  # the sglang-0.4 preset: formula + NCCL


def test_every_sweep_names_a_cluster_preset_and_its_measured_release():
    tables = engine_tables()
    assert {(k, c) for k, c, _ in tables} >= {("sglang-v1", "dgx-b200"), ("sglang-v2", "dgx-b200"), ("sglang-v1", "dgx-h200")}
    for (kernel, name, gpus), table in tables.items():
        assert name in cluster_names() and gpus <= load_cluster(name).gpus_per_node
        release = {"sglang-v1": "sglang 0.5.10", "sglang-v2": "sglang 0.5.14", "vllm-symm": "vllm 0.14.0"}[kernel]
        assert "aiconfigurator @095f58a5" in table.source and release in table.source


def test_v1_takes_inputs_under_8_mib_and_v2_up_to_16_mib_then_nccl():
    cluster, span = load_cluster("dgx-b200"), GroupSpan(8, 1)
    act = np.array([8 * MIB - 16, 8 * MIB, 16 * MIB, 16 * MIB + 16])
    tokens, nccl = act / DSV3_TOKEN_BYTES, serving_nccl_all_reduce_s(act, span, cluster)
    v1 = tp_all_reduce_s(act, tokens, span, cluster, "sglang_v1")
    v2 = tp_all_reduce_s(act, tokens, span, cluster, "sglang_v2")
    np.testing.assert_allclose(v1[0], engine_tables()[("sglang-v1", "dgx-b200", 8)].time_s(act[:1]))
    np.testing.assert_array_equal(v1[1:], nccl[1:])
    np.testing.assert_allclose(v2[:3], engine_tables()[("sglang-v2", "dgx-b200", 8)].time_s(act[:3]))
    assert v2[3] == nccl[3]


def test_measured_sizes_come_back():
    cluster, span = load_cluster("dgx-h200"), GroupSpan(4, 1)
    table = engine_tables()[("sglang-v2", "dgx-h200", 4)]
    grid = np.array(table.nbytes[2:10])
    np.testing.assert_allclose(tp_all_reduce_s(grid, grid / DSV3_TOKEN_BYTES, span, cluster, "sglang_v2"),
                               table.seconds[2:10])


def test_v2_on_b200_is_faster_than_v1_at_decode_sizes():
    """The measured finding: 0.5.14's CustomAllReduceV2 runs a 64-token DeepSeek all-reduce over 8 B200 in
    ~14 us where 0.5.10's legacy kernel (two-shot from 256 KB) takes ~27 us, and NCCL ~29 us."""
    cluster, span = load_cluster("dgx-b200"), GroupSpan(8, 1)
    act, tokens = np.array([64 * DSV3_TOKEN_BYTES]), np.array([64.0])
    v1, v2 = (tp_all_reduce_s(act, tokens, span, cluster, k)[0] for k in ("sglang_v1", "sglang_v2"))
    assert 10e-6 < v2 < 18e-6 < 22e-6 < v1 < 32e-6


def test_outside_its_groups_the_custom_kernel_steps_aside():
    cluster, act = load_cluster("dgx-h200"), np.array([1e5])
    tokens = act / DSV3_TOKEN_BYTES
    across = GroupSpan(8, 2)  # a group leaving the node: NCCL (formula across nodes)
    assert tp_all_reduce_s(act, tokens, across, cluster, "sglang_v2")[0] == collective_time_s("all_reduce", act, across, cluster)[0]
    three = GroupSpan(3, 1)  # v1 has no 3-GPU kernel: NCCL; v2 has one but no sweep here: the formula
    assert tp_all_reduce_s(act, tokens, three, cluster, "sglang_v1")[0] == serving_nccl_all_reduce_s(act, three, cluster)[0]
    assert tp_all_reduce_s(act, tokens, three, cluster, "sglang_v2")[0] == collective_time_s("all_reduce", act, three, cluster)[0]


@pytest.mark.parametrize("rule, model, gpu, expected", [
    ("sm100", "deepseek-v3", "B200", True), ("sm100", "deepseek-v3", "H200-SXM-141GB", False),
    ("sm90_sm100", "deepseek-v3", "H200-SXM-141GB", True), ("sm90_sm100", "deepseek-v3", "A100-SXM4-80GB", False),
    ("sm100", "gpt-oss-120b", "B300", True), ("sm100", "qwen3-235b-a22b", "B200", False),
    ("sm90_sm100", "qwen3-235b-a22b", "H100-SXM5-80GB", True), ("sm90_sm100", "llama3-70b", "B200", False),
    ("sm90_sm100", "llama4-scout-17b-16e", "B200", False), ("sm90_sm100", "mixtral-8x7b", "H200-SXM-141GB", False),
    ("", "deepseek-v3", "B200", False)])
def test_fusion_by_release_model_and_gpu(rule, model, gpu, expected):
    on = sglang_fusion_on(rule, resolve_model(model), gpu, tp=8, attention_dp=False, one_node=True, moe_alltoall=False)
    assert on is expected


@pytest.mark.parametrize("layout", [dict(tp=1), dict(attention_dp=True), dict(one_node=False), dict(moe_alltoall=True)])
def test_fusion_needs_tp_attention_on_one_node_without_all_to_all(layout):
    args = dict(tp=8, attention_dp=False, one_node=True, moe_alltoall=False) | layout
    assert not sglang_fusion_on("sm90_sm100", resolve_model("deepseek-v3"), "B200", **args)


def test_fused_batches_take_the_one_shot_while_flashinfer_picks_it():
    """8 ranks of hidden 7168: one-shot up to 192 tokens (42 MiB of tokens x hidden x 2 x ranks x 2 bytes),
    two-shot to 2048 (priced as the unfused kernel), the plain all-reduce above 2048."""
    cluster, span = load_cluster("dgx-b200"), GroupSpan(8, 1)
    tokens = np.array([1.0, 192, 193, 2048, 2049])
    act = tokens * DSV3_TOKEN_BYTES
    fit = cluster.intra_node.collectives[("trtllm_all_reduce", 8)]
    fused = tp_all_reduce_s(act, tokens, span, cluster, "sglang_v2" + FUSION_SUFFIX)
    plain = tp_all_reduce_s(act, tokens, span, cluster, "sglang_v2")
    np.testing.assert_allclose(fused[:2], fit.latency_s + act[:2] * fit.seconds_per_unit)
    np.testing.assert_array_equal(fused[2:], plain[2:])


def test_without_a_measured_one_shot_the_fusion_prices_as_unfused():
    cluster, span = load_cluster("dgx-b300"), GroupSpan(8, 1)  # no TensorRT-LLM one-shot fit on B300
    tokens = np.array([1.0, 64.0])
    act = tokens * DSV3_TOKEN_BYTES
    np.testing.assert_array_equal(tp_all_reduce_s(act, tokens, span, cluster, "sglang_v2" + FUSION_SUFFIX),
                                  tp_all_reduce_s(act, tokens, span, cluster, "sglang_v2"))


def test_only_sglang_runs_sglang_kernels():
    vllm = engine_runtime("vllm", "0.11.0").serving
    with pytest.raises(AutotuneError):
        vllm.with_changes(tp_allreduce="sglang_v2").__post_init__()
    with pytest.raises(AutotuneError):
        vllm.with_changes(flashinfer_allreduce_fusion="sm100").__post_init__()


@pytest.mark.parametrize("version, kind", [("0.10.2", "nccl"), ("0.11.0", "vllm_symm"), ("v0.13.0 or later", "vllm_symm"),
                                           ("0.14.0", "vllm_symm"), ("0.18.0", "nccl"), ("0.6.0", "nccl")])
def test_vllm_runs_its_symmetric_memory_dispatch_from_0_11_to_0_14(version, kind):
    """VLLM_ALLREDUCE_USE_SYMM_MEM defaults to 1 from 0.11.0 (0 in 0.10.2); 0.15+ is not read: the old pricing."""
    assert engine_runtime("vllm", version).serving.tp_allreduce == kind


def test_vllm_symm_takes_its_measured_sweep_and_elsewhere_the_old_pricing():
    h100, span = load_cluster("dgx-h100"), GroupSpan(8, 1)
    table = engine_tables()[("vllm-symm", "dgx-h100", 8)]
    grid = np.array(table.nbytes[:12])
    np.testing.assert_allclose(tp_all_reduce_s(grid, grid / 8192, span, h100, "vllm_symm"), table.seconds[:12])
    b200, act = load_cluster("dgx-b200"), np.array([64 * 1024.0, 64e6])  # no 0.14 sweep on B200
    np.testing.assert_array_equal(tp_all_reduce_s(act, act / 8192, span, b200, "vllm_symm"),
                                  tp_all_reduce_s(act, act / 8192, span, b200, "custom_ar"))
    across = GroupSpan(8, 2)
    np.testing.assert_array_equal(tp_all_reduce_s(act, act / 8192, across, h100, "vllm_symm"),
                                  collective_time_s("all_reduce", act, across, h100))


def test_only_vllm_runs_vllm_symm():
    with pytest.raises(AutotuneError):
        engine_runtime("sglang", "0.5.12").serving.with_changes(tp_allreduce="vllm_symm").__post_init__()
