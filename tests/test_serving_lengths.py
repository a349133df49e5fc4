"""Per-request lengths drawn from the datasets' published distributions (autotune/data/serving_lengths.toml)."""

from __future__ import annotations

import csv
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving
from autotune.cost.serving_lengths import RequestLengths, length_names, request_lengths
from autotune.cost.serving_load import Load, requests_for
from autotune.errors import AutotuneError

DATA = Path(__file__).parent / "data" / "serving_runs.csv"


def _row(row_id: str) -> dict:
    with open(DATA, newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == row_id)


def _datasets() -> dict:
    return tomllib.loads(resources.files("autotune.data").joinpath("serving_datasets.toml").read_text())


def test_each_distribution_keeps_its_datasets_sourced_means():
    """The tables' means (the trapezoid over their percentiles) within the 0.3% the data file states,
    and a large draw's within 1% (whole tokens), for every dataset that names a distribution."""
    named = {d["lengths"]: d for d in _datasets().values() if "lengths" in d}
    assert set(named) == set(length_names()) == {"sharegpt", "openorca-mlperf", "mixtral-mlperf",
                                                 "llama3-405b-mlperf", "deepseek-r1-mlperf"}
    for name, dataset in named.items():
        lengths = request_lengths(name)
        want_in, want_out = dataset["mean_input_tokens"]["value"], dataset["mean_output_tokens"]["value"]
        assert lengths.mean_input_tokens == pytest.approx(want_in, rel=0.003)
        assert lengths.mean_output_tokens == pytest.approx(want_out, rel=0.003)
        drawn_in, drawn_out = lengths.draw(200_000, seed=0)
        assert drawn_in.mean() == pytest.approx(want_in, rel=0.01) and drawn_out.mean() == pytest.approx(want_out, rel=0.01)
        assert drawn_in.min() >= 1 and drawn_out.min() >= 1 and lengths.source.strip()


def test_sharegpts_table_keeps_the_benchmarks_filter():
    """ShareGPT's table is the requests `vllm bench serve` keeps (prompt <= 1,024 tokens, prompt + output <=
    2,048), scaled by under 3% to the sourced means: no prompt past the limit, and the outputs' tail is the
    dataset's own, past 1,024 tokens for the longest 0.1% (not a percentile cut)."""
    lengths = request_lengths("sharegpt")
    assert max(lengths.input_tokens) <= 1024 and max(lengths.output_tokens) <= 2048 - min(lengths.input_tokens)
    assert lengths.output_tokens[-2] > 1024  # the 99.9th percentile
    assert "is_valid_sequence" in lengths.source


def test_draws_are_deterministic_in_the_seed_and_leave_arrivals_alone():
    lengths = request_lengths("sharegpt")
    first, again, other = lengths.draw(500, seed=7), lengths.draw(500, seed=7), lengths.draw(500, seed=8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])
    fixed = Load(kind="rate", num_requests=300, input_len=215, output_len=194, rate_per_s=4.0, seed=3)
    spread = replace(fixed, lengths=lengths)
    a, b = requests_for(fixed), requests_for(spread)
    assert np.array_equal(a.arrival_s, b.arrival_s)  # the lengths' stream is not the arrivals'
    assert np.all(a.input_len == 215) and len(np.unique(b.input_len)) > 50
    assert np.array_equal(requests_for(spread).output_len, b.output_len)


def test_a_sharegpt_row_is_simulated_at_varying_lengths():
    """sgl060-015 (Llama 3.1 8B, SGLang on an A100 at 4 requests/s over ShareGPT) draws each request's
    lengths: the simulated run holds many prompt and output lengths around ShareGPT's means."""
    case = case_from_row(_row("sgl060-015"))
    assert case.load.lengths is not None and case.load.lengths.name == "sharegpt"
    assert any("drawn per request" in a for a in case.assumed)
    trace = run_serving(case.deployment, replace(case.load, num_requests=300)).trace
    assert len(np.unique(trace.input_len)) > 100 and len(np.unique(trace.output_len)) > 100
    assert trace.input_len.max() > 4 * trace.input_len.min()
    assert trace.input_len.mean() == pytest.approx(215.2, rel=0.15)
    assert trace.output_len.mean() == pytest.approx(194.4, rel=0.15)


def test_rows_stating_their_lengths_keep_them_for_every_request():
    assert case_from_row(_row("trt017-013")).load.lengths is None  # isl 128 / osl 2048 in its cells
    one = case_from_row(dict(_row("sgl060-015"), isl="300"))  # one length stated: fixed at it and the other's mean
    assert one.load.lengths is None and (one.load.input_len, one.load.output_len) == (300, 194)
    mixtral = case_from_row(_row("mlp41-011"))  # MLPerf's Mixtral set: its own samples' lengths
    assert mixtral.load.lengths is not None and mixtral.load.lengths.name == "mixtral-mlperf"


def test_bad_distributions_are_refused_with_the_field():
    with pytest.raises(AutotuneError, match="lengths"):
        request_lengths("sharegpt-v4")
    with pytest.raises(AutotuneError, match="input_tokens"):
        RequestLengths(name="x", percents=(0.0, 50.0, 100.0), input_tokens=(5.0, 3.0, 9.0), output_tokens=(1.0, 2.0, 3.0),
                       source="test")
    with pytest.raises(AutotuneError, match="percents"):
        RequestLengths(name="x", percents=(0.0, 50.0), input_tokens=(1.0, 2.0), output_tokens=(1.0, 2.0), source="test")
    with pytest.raises(AutotuneError, match="lengths"):
        Load(kind="max_throughput", num_requests=10, input_len=10, output_len=10, lengths="sharegpt")
