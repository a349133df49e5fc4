"""Blackwell Ultra (B300, GB300): the device profiles, the GPU cells that name them, and MLPerf
Inference v5.1's GB300 results (NVIDIA's GB300 NVL72 x72, CoreWeave's GB300 x8) priced from a row
naming only its benchmark, system and scenario. tests/data/mlperf_v5_1_gb300.csv holds the results;
how close the predictions come is reported by `autotune check-published`, not asserted."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_names import RowProblem, gpu_cluster, served_precision
from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row
from autotune.spec.hardware_data import load_cluster, load_device

_CHECK_ROWS = Path(__file__).parent / "data" / "mlperf_v5_1_gb300.csv"
_B300_ROWS = Path(__file__).parent / "data" / "inferencex_b300_check.csv"
_MIB = 2**20


def _check_rows(path: Path = _CHECK_ROWS) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(("name", "older", "mib", "fp4_ratio"), [("b300", "b200", 275040, 14 / 9),
                                                                  ("gb300", "gb200", 284208, 15 / 10)])
def test_blackwell_ultra_keeps_its_predecessor_but_for_fp4_attention_and_memory(name, older, mib, fp4_ratio):
    """The driver's memory, 1.5x the FP4 peak, and kernel fits no slower than the predecessor's
    (the TensorRT-LLM linears and context attention measured faster), the memory fit carried."""
    new, old = load_device(name), load_device(older)
    assert new.memory_bytes == mib * _MIB > 1.4 * old.memory_bytes
    assert new.peak_flops["nvfp4"] / old.peak_flops["nvfp4"] == pytest.approx(fp4_ratio)
    assert new.peak_flops["fp8"] == old.peak_flops["fp8"] and new.peak_flops["bf16"] == old.peak_flops["bf16"]
    for op_class, dtype in (("gemm", "nvfp4"), ("gemm", "fp8"), ("serving_gemm", "nvfp4"), ("attention", "bf16")):
        assert new.regression(op_class, dtype).seconds_per_unit < old.regression(op_class, dtype).seconds_per_unit
    assert new.memory_regression("stream").seconds_per_unit == old.memory_regression("stream").seconds_per_unit


@pytest.mark.parametrize(("cell", "cluster", "gpus_per_node"), [
    ("GB300-288GB", "gb300-nvl72", 72), ("NVIDIA GB300 NVL72", "gb300-nvl72", 72), ("HGX B300", "dgx-b300", 8),
    ("NVIDIA B300 SXM6 AC", "dgx-b300", 8)])
def test_a_blackwell_ultra_cell_reads_onto_its_cluster(cell, cluster, gpus_per_node):
    assert gpu_cluster(cell) == cluster
    assert load_cluster(cluster).gpus_per_node == gpus_per_node


def test_the_desktop_gb300_is_another_part():
    with pytest.raises(RowProblem, match="252 GB"):
        gpu_cluster("NVIDIA DGX Station GB300")


def test_int8_w8a8_is_priced_as_fp8_on_b200_but_not_on_blackwell_ultra():
    """B200's INT8 and FP8 dense rates are equal (4.5 P); Blackwell Ultra cut INT8 to ~150 TOPS."""
    assert served_precision("w8a8", "vllm", ("bf16", "fp8"), {"bf16", "fp8"}, "B200")[0] == "fp8"
    with pytest.raises(RowProblem, match="INT8"):
        served_precision("w8a8", "vllm", ("bf16", "fp8"), {"bf16", "fp8"}, "GB300")


def test_the_check_rows_take_their_systems_published_configs():
    rows = _check_rows()
    assert len(rows) == 12 and len({r["id"] for r in rows}) == 12
    seen = set()
    for row in rows:
        assert "/results/GB300-" in row["source"] and "mlperf_log_summary.txt" in row["source"]
        case = case_from_row(row)
        dep, engine = case.deployment, case.deployment.runtime.serving
        assert dep.runtime.name == "mlperf-nvidia-5.1" and dep.dtype == "nvfp4"
        assert dep.cluster.device.name == "GB300" and any("configs/" in a for a in case.assumed)
        seen.add((row["model"].split(" ")[0], int(row["gpus"]), dep.tp, dep.ep, dep.replicas, dep.attention_dp,
                  engine.max_num_seqs, engine.max_num_batched_tokens, engine.adp_batching_wait_iters))
    assert seen == {("DeepSeek-R1", 72, 8, 8, 9, True, 1536, 6656, 2), ("DeepSeek-R1", 72, 8, 8, 9, True, 512, 3456, 2),
                    ("Llama-3.1-405B", 72, 2, 1, 36, False, 2048, 1536, 10),
                    ("DeepSeek-R1", 8, 8, 8, 1, True, 1536, 6656, 10), ("DeepSeek-R1", 8, 8, 8, 1, True, 1536, 6656, 2)}


def test_a_gb300_llama_405b_server_row_is_priced():
    """One row end to end (the llama3.1-405b Server TPOT): a prediction, not a reason."""
    rows = [r for r in _check_rows() if r["model"].startswith("Llama") and r["metric"] == "tpot_mean"]
    (check,) = check_serving_rows(rows)
    assert check.error_pct is not None and check.predicted > 0, check.reason


@pytest.mark.slow
def test_every_gb300_check_row_is_priced():
    """All 12 rows (DeepSeek-R1 with attention DP and expert parallelism, Llama 3.1 405B) priced; takes minutes."""
    checks = check_serving_rows(_check_rows())
    assert all(c.error_pct is not None and c.predicted > 0 for c in checks), [c.reason for c in checks if c.reason]


def test_the_b300_sglang_rows_read_their_recipe_flags():
    """InferenceX's DeepSeek-R1 NVFP4 on one B300 node (SGLang 0.5.12, TP4 EP4 and TP8 EP8, no DP attention)."""
    rows = _check_rows(_B300_ROWS)
    assert len(rows) == 36 and {r["gpu"] for r in rows} == {"B300"}
    for row in rows[::3]:
        case = case_from_row(row)
        dep, engine = case.deployment, case.deployment.runtime.serving
        assert dep.cluster.name == "dgx-b300" and dep.dtype == "nvfp4" and not dep.attention_dp
        assert (dep.tp, dep.ep) == (int(row["tp"]), int(row["ep"])) and engine.nvfp4_gemm_fit == "sglang"
        assert engine.memory_fraction == 0.85 and any("launch_max_num_seqs 256" in a for a in case.assumed)


def test_a_b300_sglang_row_is_priced():
    (check,) = check_serving_rows([r for r in _check_rows(_B300_ROWS) if r["id"] == "ixb300-018"])
    assert check.error_pct is not None and check.predicted > 0, check.reason


@pytest.mark.slow
def test_every_b300_sglang_check_row_is_priced():
    checks = check_serving_rows(_check_rows(_B300_ROWS))
    assert all(c.error_pct is not None and c.predicted > 0 for c in checks), [c.reason for c in checks if c.reason]
