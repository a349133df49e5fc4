"""The 1,000-prompt vLLM bursts' published distributions (tests/data/vllm_burst_published.toml) and the
diagnosis that reads them (scripts/diag_vllm_burst.py; docs/serving.md, "The 1,000-prompt bursts' distributions").

The file's figures are the same runs as the check rows of tests/data/vllm_newer_check.csv, so each row's value
must be the file's; and in the shared-loop model a per-request API-server cost paid before the request is sent
moves every first token later by the burst's total of it and leaves the decode untouched, which is what the
diagnosis reads off the Qwen3 runs' constant TTFT shift.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("diag_vllm_burst", ROOT / "scripts" / "diag_vllm_burst.py")
diag = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(diag)

RUNS = diag.published_runs()
ROWS = diag.check_rows()
# the ShareGPT bursts of the check file: every request at once, lengths from the dataset
BURSTS = sorted(i for i, r in ROWS.items() if "request rate inf" in r["concurrency_or_batch"] and not r["isl"]
                and ("1000 prompts" in r["concurrency_or_batch"] or "984 requests" in r["concurrency_or_batch"]))
# the check rows' metrics and where the same figure sits in a run of the file
_FIELD = {"Mean TTFT (ms)": ("ttft_ms", 0), "Mean TPOT (ms)": ("tpot_ms", 0)}


def _same_run(row_id: str) -> dict | None:
    """The file's run of a check row: the run priced as it, or one of the same deployment and source."""
    row = ROWS[row_id]
    for run in RUNS.values():
        base = ROWS[run["row"]]
        keys = ("source", "model", "gpu", "tp", "ep", "precision", "engine_version")
        if all(base[k] == row[k] for k in keys) and base["notes"].split(";")[0] == row["notes"].split(";")[0]:
            return run
    return None


def test_every_burst_check_row_has_its_published_run():
    assert len(BURSTS) >= 15
    missing = [i for i in BURSTS if _same_run(i) is None]
    assert not missing, f"burst rows without a run in vllm_burst_published.toml: {missing}"


@pytest.mark.parametrize("row_id", BURSTS)
def test_published_run_agrees_with_its_check_row(row_id):
    run, row = _same_run(row_id), ROWS[row_id]
    assert run is not None
    value = float(row["value"])
    if row["metric"] in _FIELD:
        field, k = _FIELD[row["metric"]]
        assert run[field][k] == pytest.approx(value, abs=0.006)
    else:  # output tokens/s: the run's generated tokens over its duration (the printed figure, rounded)
        assert row["metric"] == "output_tokens_per_s"
        assert run["generated_tokens"] / run["duration_s"] == pytest.approx(value, rel=2e-3)


def test_distributions_are_ordered_triples():
    for name, run in RUNS.items():
        for field in ("ttft_ms", "tpot_ms", "itl_ms"):
            mean, median, p99 = run[field]
            assert 0 < median <= p99 and 0 < mean <= p99, (name, field)


def test_a_cost_before_send_shifts_first_tokens_and_leaves_decode():
    row = ROWS[RUNS["qwen3_h100_tp8_bf16"]["row"]]
    base = diag.model_stats(row)
    extra_s = 4.3e-3
    shifted = diag.model_stats(row, extra_s)
    burst = 1000  # the Qwen3 rows' requests sent at once (984 of them succeeded)
    assert shifted["ttft_ms"][0] - base["ttft_ms"][0] == pytest.approx(burst * extra_s * 1e3, rel=0.05)
    assert shifted["ttft_ms"][1] - base["ttft_ms"][1] == pytest.approx(burst * extra_s * 1e3, rel=0.05)
    assert shifted["tpot_ms"][0] == pytest.approx(base["tpot_ms"][0], rel=0.01)
    assert shifted["itl_ms"][1] == pytest.approx(base["itl_ms"][1], rel=0.01)
    assert shifted["duration_s"] > base["duration_s"] + 0.9 * burst * extra_s
