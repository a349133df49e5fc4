"""SGLang's --scheduler-recv-interval (the scheduler takes new requests in every N decode steps) and the
benchmark clients' --random-range-ratio (lengths drawn from [int(L x ratio), L]), as InferenceX launches
and loads SGLang (benchmarks/dsr1_fp8_b200.sh @1fc5d73c; .github/workflows/benchmark-tmpl.yml)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_lengths import uniform_lengths
from autotune.cost.serving_load import Load, requests_for
from autotune.cost.serving_run import Requests
from autotune.cost.serving_sim import Schedule, simulate
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

CHECK = Path(__file__).parent / "data" / "sglang_newer_check.csv"


def _row(row_id: str) -> dict:
    with open(CHECK, newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == row_id)


def test_uniform_lengths_stay_in_the_clients_range_with_its_mean():
    lengths = uniform_lengths(1024, 8192, 0.8, source="test")
    ins, outs = lengths.draw(20000, seed=3)
    assert ins.min() >= 819 and ins.max() <= 1024 and outs.min() >= 6553 and outs.max() <= 8192
    assert ins.mean() == pytest.approx(lengths.mean_input_tokens, rel=0.01) == pytest.approx(921.5, rel=0.01)
    with pytest.raises(AutotuneError, match="random_range_ratio"):
        uniform_lengths(1024, 1024, 0.0, source="test")


def test_an_inferencex_row_draws_its_lengths_and_an_unknown_client_keeps_them():
    row = _row("sglnew-008")
    case = case_from_row(row)
    assert case.load.lengths is not None and case.load.lengths.input_tokens == (819.0, 1024.0)
    assert case.load.input_len == case.load.output_len == 922  # the means size the engine's limits
    assert case.deployment.runtime.serving.scheduler_recv_interval == 30  # the recipe's flag at concurrency 16
    other = dict(row, source="a vLLM benchmark", notes=row["notes"].replace("InferenceX", "a client"))
    kept = case_from_row(other)
    assert kept.load.lengths is None and (kept.load.input_len, kept.load.output_len) == (1024, 1024)
    assert any("rule is not known" in a for a in kept.assumed)
    fixed = case_from_row(dict(row, notes=row["notes"].replace("--random-range-ratio 0.8", "--random-range-ratio 1")))
    assert fixed.load.lengths is None


def _sglang_run(interval: int):
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("sglang"), tp=1, weight_dtype="bf16")
    return run_serving(dep, Load(kind="max_throughput", num_requests=2, input_len=512, output_len=400)), dep


def _schedule(run, interval: int) -> Schedule:
    engine, limits = run.deployment.runtime.serving, run.limits
    return Schedule(scheduler=engine.scheduler, chunked_prefill=True, prefill_chunk_tokens=engine.prefill_chunk_tokens,
                    max_num_seqs=64, max_num_batched_tokens=limits.max_num_batched_tokens,
                    kv_capacity_tokens=limits.kv_capacity_tokens, kv_block_tokens=1, kv_reservation="grow",
                    recv_interval=interval)


def test_a_request_arriving_mid_decode_waits_for_the_next_poll():
    """One request decodes; a second arrives during its 3rd decode step. Polling every step it is
    prefilled after that step; polling every 10 it waits for the 10th decode step since the poll
    that followed the first prompt, so its first token comes 7 decode steps later."""
    run, _ = _sglang_run(1)
    step = run.step
    prefill = step.gpu_s(decodes=0, context=0, prefill_tokens=512, pairs=512 * 513 / 2, sampled=1)
    decode = step.gpu_s(decodes=1, context=513, prefill_tokens=0, pairs=0, sampled=1)
    arrive = prefill + 2.5 * decode  # during the third decode step
    req = Requests(arrival_s=np.array([0.0, arrive]), input_len=np.array([512, 512]), output_len=np.array([400, 50]))
    every, tenth = (simulate(req, _schedule(run, n), step) for n in (1, 10))
    assert every.ttft_s[0] == tenth.ttft_s[0]  # the first request found the engine idle
    extra = tenth.first_token_s[1] - every.first_token_s[1]
    assert extra == pytest.approx(7 * decode, rel=0.02)


def test_a_longer_interval_lengthens_ttft_not_decoding():
    run, _ = _sglang_run(1)
    load = Load(kind="concurrency", num_requests=160, input_len=900, output_len=300, concurrency=16,
                lengths=uniform_lengths(900, 300, 0.8, source="test"))
    every, thirtieth = (simulate(requests_for(load), _schedule(run, n), run.step) for n in (1, 30))
    decode = run.step.gpu_s(decodes=16, context=16 * 1000, prefill_tokens=0, pairs=0, sampled=16)
    assert thirtieth.ttft_s.mean() - every.ttft_s.mean() > 5 * decode  # about half an interval of waiting
    assert thirtieth.tpot_s.mean() < every.tpot_s.mean() * 1.1


def test_recipe_yaml_spelling_sets_the_interval():
    row = _row("sglnew-026")
    notes = row["notes"].replace("--scheduler-recv-interval 10", "scheduler-recv-interval: 10")
    assert case_from_row(dict(row, notes=notes)).deployment.runtime.serving.scheduler_recv_interval == 10
    with pytest.raises(AutotuneError, match="scheduler_recv_interval"):
        load_runtime("sglang").serving.with_changes(scheduler_recv_interval=0)
