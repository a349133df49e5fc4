"""A replica's budget-full capacity (cost/serving_capacity.py) and the note check-published gives a rate row
priced above it: the three saturated MLPerf v5 Server rows (issue 31, mlpsat44) and their Offline rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.cost.serving_capacity import budget_capacity, saturation_note
from autotune.cost.serving_load import Load
from autotune.spec.json_file import read_csv_file

_DATA = Path(__file__).parent / "data"


@dataclass(frozen=True, kw_only=True)
class _LinearStep:
    """A step of fixed_s plus s_per_token for each token it runs, recording what it was asked."""

    fixed_s: float
    s_per_token: float
    asked: list

    def gpu_s(self, *, decodes: int, context: float, prefill_tokens: int, pairs: float, sampled: int) -> float:
        self.asked.append(dict(decodes=decodes, prefill_tokens=prefill_tokens, pairs=pairs))
        return self.fixed_s + self.s_per_token * (decodes + prefill_tokens)


def _limits(tokens: int, seqs: int = 4096, kv_tokens: int = 10**9) -> SimpleNamespace:
    return SimpleNamespace(max_num_batched_tokens=tokens, max_num_seqs=seqs, kv_capacity_tokens=kv_tokens)


def test_budget_full_step_holds_the_loads_token_mix():
    step = _LinearStep(fixed_s=0.01, s_per_token=1e-4, asked=[])
    cap = budget_capacity(step, _limits(1000), input_len=300, output_len=100)
    assert (cap.decodes, cap.prompt_tokens) == (250.0, 750.0)  # 1000 x 100 / 400 decodes, the rest prompts
    assert step.asked[0]["pairs"] == pytest.approx(750 * 301 / 2)
    assert cap.step_s == pytest.approx(0.11)
    assert cap.requests_per_s == pytest.approx(250 / 100 / 0.11)


def test_batch_cap_leaves_the_budget_part_empty():
    step = _LinearStep(fixed_s=0.01, s_per_token=1e-4, asked=[])
    cap = budget_capacity(step, _limits(1000, seqs=100), input_len=300, output_len=100)
    assert (cap.decodes, cap.prompt_tokens) == (100.0, 300.0)  # prompts only as fast as 100 requests finish
    cap_kv = budget_capacity(step, _limits(1000, kv_tokens=35000), input_len=300, output_len=100)
    assert cap_kv.decodes == pytest.approx(35000 / 350)  # the KV cache at the mean cached length, 300 + 50


def _run(kind: str, rate: float) -> SimpleNamespace:
    load = Load(kind=kind, num_requests=500, input_len=300, output_len=100, rate_per_s=rate)
    return SimpleNamespace(load=load, deployment=SimpleNamespace(speculation=None), limits=_limits(1000),
                           step=_LinearStep(fixed_s=0.01, s_per_token=1e-4, asked=[]))


def test_note_only_for_a_rate_above_capacity():
    capacity = 250 / 100 / 0.11
    assert saturation_note(_run("rate", 0.99 * capacity)) == ""
    note = saturation_note(_run("rate", 1.01 * capacity))
    assert note.startswith("saturated") and "500 requests simulated" in note
    assert saturation_note(_run("max_throughput", 0.0)) == ""


def _rows(name: str, ids: tuple[str, ...]) -> list[dict]:
    return [r for r in read_csv_file(_DATA / name, "csv")[1] if r["id"] in ids]


def test_saturated_mlperf_server_run_says_so():
    """Llama 2 70B on 8 H200s (v5.0): the Server run's 14.28 requests/s an instance is above the priced capacity
    (the Offline row reads -15%), so its rows carry the note; the Offline row, all queued, does not."""
    checks = {c.row_id: c for c in check_serving_rows(_rows("mlperf_v5_0_nvidia.csv", ("mlp50-016", "mlp50-017")))}
    assert checks["mlp50-016"].notes == ()
    (note,) = checks["mlp50-017"].notes
    assert note.startswith("saturated: 14.28 requests/s a replica") and "notes" in checks["mlp50-017"].to_dict()
