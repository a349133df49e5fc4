"""scripts/diag_prompt_steps.py: the recorder sees every prompt step of a row's run and leaves the simulator as it
found it, and its windows split the steps by start time (docs/serving.md, "SGLang 0.5.3-0.5.5's graphs and
reserve")."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np

import autotune.cost.serving_sim as serving_sim

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("diag_prompt_steps", ROOT / "scripts" / "diag_prompt_steps.py")
diag = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(diag)


def test_windows_split_steps_by_start():
    steps = np.array([[1.0, 0.2, 4000, 0], [6.0, 0.1, 400, 300], [7.0, 0.1, 200, 300]])
    lines = diag.window_lines(steps, [0, 5, 10])
    assert lines[0].startswith("  0-5 s: 1 prompt steps, 0.2 s, mean 4000")
    assert lines[1].startswith("  5-10 s: 2 prompt steps, 0.2 s, mean 300")


def test_recorder_sees_prompt_steps_and_restores_the_simulator():
    with open(ROOT / "tests" / "data" / "serving_runs.csv", newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["engine"].lower() == "sglang")
    single = serving_sim._single_step
    steps = diag.prompt_steps(row)
    assert serving_sim._single_step is single
    assert len(steps) > 0 and (steps[:, 1] > 0).all() and (steps[:, 2] > 0).all()
