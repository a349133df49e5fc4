"""A replica's budget-full capacity (cost/serving_capacity.py) and the note check-published gives a rate row
priced above it: the three saturated MLPerf v5 Server rows (issue 31, mlpsat44) and their Offline rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.cost.serving_capacity import budget_capacity, latency_pct_per_capacity_pct, priced_load, saturation_note
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


def test_priced_load_and_its_latency_conditioning():
    """rho = rate / budget-full capacity; below capacity 1% of capacity moves the step by rho / (1 - rho) %."""
    capacity = 250 / 100 / 0.11
    assert priced_load(_run("rate", 0.95 * capacity)) == pytest.approx(0.95)
    assert latency_pct_per_capacity_pct(0.95) == pytest.approx(19.0)
    assert latency_pct_per_capacity_pct(0.5) == pytest.approx(1.0)
    assert latency_pct_per_capacity_pct(1.01) is None and latency_pct_per_capacity_pct(None) is None
    assert priced_load(_run("max_throughput", 0.0)) is None


def test_conditioning_matches_a_linear_steps_fixed_point():
    """The step a + b x tokens at tokens = rate x length x step: a / (1 - rho); 1% less b (1% more capacity) takes
    about rho / (1 - rho) % off it (to first order), which the conditioning says."""
    a, length, rho = 0.01, 400.0, 0.9
    b = 1e-4
    rate = rho / (length * b)

    def step(per_token: float) -> float:
        return a / (1.0 - rate * length * per_token)

    moved_pct = 100.0 * (1.0 - step(b / 1.0001) / step(b)) / 0.01  # % a 1% capacity step, from a 0.01% one
    assert moved_pct == pytest.approx(latency_pct_per_capacity_pct(rho), rel=1e-3)


def _rows(name: str, ids: tuple[str, ...]) -> list[dict]:
    return [r for r in read_csv_file(_DATA / name, "csv")[1] if r["id"] in ids]


def test_saturated_mlperf_server_run_says_so():
    """Llama 2 70B on 8 H200s (v5.0) at 1.25x its published target QPS: 17.85 requests/s an instance is above the
    priced capacity, so its rows carry the note; the Offline row, all queued, does not."""
    offline, server = _rows("mlperf_v5_0_nvidia.csv", ("mlp50-016", "mlp50-017"))
    server = dict(server, concurrency_or_batch=server["concurrency_or_batch"].replace("114.24", "142.8"))
    checks = {c.row_id: c for c in check_serving_rows([offline, server])}
    assert checks["mlp50-016"].notes == ()
    (note,) = checks["mlp50-017"].notes
    assert note.startswith("saturated: 17.85 requests/s a replica") and "notes" in checks["mlp50-017"].to_dict()
    row = checks["mlp50-017"].to_dict()
    assert row["priced_load"] > 1.0 and row["latency_pct_per_capacity_pct"] is None  # saturated: no finite slope
    offline = checks["mlp50-016"].to_dict()
    assert offline["priced_load"] is None and offline["latency_pct_per_capacity_pct"] is None  # not a rate row


def test_rate_row_carries_its_priced_load():
    """A rate row below capacity (SGLang, Llama 3.1 8B on an A100 at 4 requests/s): check-published's priced_load is
    the row's rate over the budget-full capacity of the replica it simulated, and its conditioning rho / (1 - rho)."""
    from autotune.calibrate.serving_rows import case_from_row
    from autotune.cost.serving_eval import run_serving

    (row,) = _rows("serving_runs.csv", ("sgl060-015",))
    (check,) = check_serving_rows([row])
    case = case_from_row(row)
    run = run_serving(case.deployment, case.load)
    capacity = budget_capacity(run.step, run.limits, case.load.input_len, case.load.output_len)
    assert check.priced_load == pytest.approx(case.load.rate_per_s / capacity.requests_per_s)
    assert 0.0 < check.priced_load < 1.0
    out = check.to_dict()
    assert out["latency_pct_per_capacity_pct"] == pytest.approx(check.priced_load / (1.0 - check.priced_load))
