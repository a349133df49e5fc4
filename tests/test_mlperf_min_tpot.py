"""scripts/mlperf_min_tpot.py: the cap a measured shortest TPOT sets on a graph-less engine's host issue."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.spec.json_file import read_csv_file

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("mlperf_min_tpot", ROOT / "scripts" / "mlperf_min_tpot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(path: str, row_id: str) -> dict:
    rows = read_csv_file(str(ROOT / "tests" / "data" / path), "csv")[1]
    return next(r for r in rows if r["id"] == row_id and r["metric"] == "tpot_mean")


def test_cap_divides_the_shortest_tpot_over_one_stage_of_layers():
    script = _script()
    tp_only = case_from_row(_row("mlperf_v5_1_nvidia.csv", "mlp51-018"))  # Llama 3.1 8B, 32 layers, PP 1
    assert tp_only.deployment.pp == 1
    assert script.host_issue_bound_us(tp_only, 3_200_000) == pytest.approx(3_200.0 / 32)
    staged = case_from_row(_row("mlperf_v5_0_nvidia.csv", "mlp50-038"))  # Llama 2 70B on H100s, PP 2
    assert staged.deployment.pp == 2
    # a pipeline stage issues only its own layers, so the same step allows twice the time a layer
    assert script.host_issue_bound_us(staged, 8_000_000) == pytest.approx(8_000.0 / 40)


def test_no_tensorrt_row_of_v41_or_v51_is_marked_as_graphed():
    marks = {row_id: entry[3] for row_id, entry in _script().MEASURED_MIN_NS.items()}
    assert all(mark == "no" for row_id, mark in marks.items() if row_id.startswith(("mlp41-", "mlp51")))
