"""A random-dataset row whose notes quote the run's generated total below prompts x the stated output
length decodes the run's mean (end-of-sequence stops without --ignore-eos); a dataset row whose lengths are
drawn (ShareGPT) and whose notes quote the client's totals draws requests that sum to them; other rows keep
their lengths."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_published import case_from_row
from autotune.cost.serving_load import requests_for

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


def _drawn_totals(case) -> tuple[int, int]:
    requests = requests_for(case.load)
    return int(requests.input_len.sum()) * case.deployment.replicas, int(requests.output_len.sum()) * case.deployment.replicas


@pytest.mark.parametrize("row_id, total_in, total_out", [("vn-ds-01", 219171, 200752), ("vn-go-01", 215312, 195544),
                                                         ("vn-b2-01", 215312, 197144)])
def test_a_sharegpt_burst_draws_its_quoted_totals(row_id, total_in, total_out):
    case = _case(row_id)
    assert case.load.lengths is not None and "scaled to the run's totals" in case.load.lengths.name
    drawn_in, drawn_out = _drawn_totals(case)
    assert drawn_in == pytest.approx(total_in, rel=0.002) and drawn_out == pytest.approx(total_out, rel=0.002)
    assert any("quoted totals" in note for note in case.assumed)


def test_a_sharegpt_burst_without_totals_keeps_the_datasets_draw():
    plain = _case("vn-go-01", notes="ShareGPT_V3_unfiltered_cleaned_split, --num-prompts 1000")
    quoted = _case("vn-go-01")
    assert plain.load.lengths.name == "sharegpt" and plain.load.output_len == 194
    assert _drawn_totals(plain) != _drawn_totals(quoted)


def test_only_the_quoted_total_moves_its_length():
    only_out = _case("vn-go-01", notes="ShareGPT_V3_unfiltered_cleaned_split, --num-prompts 1000; generated 210000")
    plain = requests_for(_case("vn-go-01", notes="ShareGPT_V3_unfiltered_cleaned_split, --num-prompts 1000").load)
    scaled = requests_for(only_out.load)
    assert np.array_equal(scaled.input_len, plain.input_len)
    assert int(scaled.output_len.sum()) == pytest.approx(210000, rel=0.002)


def test_fixed_concurrency_rows_keep_the_stated_length():
    case = _case("vn-ix-02", notes="InferenceX sweep (generated 1000)")
    assert case.load.kind == "concurrency" and case.load.output_len == 1024


def test_a_burst_quoting_its_totals_after_its_prompt_count_draws_them():
    # vLLM PR #8050's row: "ShareGPT 500 prompts (100895 input / 100377 output tokens)", the client's two totals
    rows = {r["id"]: r for r in csv.DictReader(open(Path(__file__).parent / "data" / "vllm_060_async_output.csv"))}
    case = case_from_row(rows["pr8050-001"])
    assert "scaled to the run's totals" in case.load.lengths.name
    assert _drawn_totals(case) == pytest.approx((100895, 100377), rel=0.002)
    # a per-request length in that phrasing, not after a prompt count, is not read as the run's totals
    plain = case_from_row({**rows["pr8050-001"], "notes": "ShareGPT, 500 prompts; 1024 input / 128 output tokens"})
    assert plain.load.lengths.name == "sharegpt"


@pytest.mark.parametrize("notes", ["ShareGPT, 1000 prompts; Total input tokens: 215312, Total generated tokens: 195544",
                                   "ShareGPT, 1000 prompts; Total input tokens:   215,312  Total generated tokens:   195,544"])
def test_the_clients_own_total_lines_are_read(notes):
    # the lines as vllm bench serve prints them ("Total generated tokens:"), not only the notes' "generated N"
    case = _case("vn-go-01", notes=notes)
    assert _drawn_totals(case) == pytest.approx((215312, 195544), rel=0.002)
    random_row = _case("vn-go-09", notes="--dataset-name random; Total generated tokens: 67205")
    assert random_row.load.output_len == 134
