"""A random-dataset row whose notes quote the run's generated total below prompts x the stated output
length decodes the run's mean (end-of-sequence stops without --ignore-eos); other rows keep their lengths."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_published import case_from_row

ROWS = {r["id"]: r for r in csv.DictReader(open(Path(__file__).parent / "data" / "vllm_newer_check.csv"))}


def _case(row_id: str, **cells):
    return case_from_row({**ROWS[row_id], **cells})


def test_early_stops_take_the_runs_mean_output():
    case = _case("vn-go-09")  # 500 prompts, 4000 / 200 stated, 67,205 generated
    assert case.load.output_len == 134 and case.load.input_len == 4000
    assert any("67205" in note for note in case.assumed)


@pytest.mark.parametrize("notes", ["--dataset-name random (generated 100000)", "--dataset-name random (generated 120000)",
                                   "--dataset-name random, no total quoted"])
def test_a_total_at_or_above_the_stated_lengths_changes_nothing(notes):
    assert _case("vn-go-09", notes=notes).load.output_len == 200


def test_rows_without_stated_lengths_keep_the_datasets():
    assert _case("vn-go-01").load.output_len == 194  # ShareGPT's mean; its notes quote 'generated 195544'


def test_fixed_concurrency_rows_keep_the_stated_length():
    case = _case("vn-ix-02", notes="InferenceX sweep (generated 1000)")
    assert case.load.kind == "concurrency" and case.load.output_len == 1024
