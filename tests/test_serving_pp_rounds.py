"""autotune/cost/serving_pp_rounds.py: a TensorRT-LLM pp instance as one stream of pipeline rounds, each the
fuller micro-batch's step, its micro-batches drawing on one queue."""

from __future__ import annotations

import csv
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.cost.serving_pp_rounds import RoundStep, pooled_load
from autotune.cost.serving_step import StepModel

_ROWS = Path(__file__).parent / "data" / "mlperf_v5_0_nvidia.csv"


@cache
def _case(row_id: str = "mlp50-010"):
    """v5.0 B200 x8 Llama 3.1 405B Server: TP 2 x PP 2 instances, 128 sequences and 1,024 tokens a micro-batch."""
    rows = {r["id"]: r for r in csv.DictReader(open(_ROWS, encoding="utf-8"))}
    return case_from_row(rows[row_id])


def _steps(pp: int = 2, budget: int = 1024):
    step = replica_step_model(_case().deployment, max_tokens=budget, max_sampled=budget + 1)
    fields = {f: getattr(step, f) for f in StepModel.__dataclass_fields__}
    fields["decode_s_per_position"] = step.decode_s_per_position / pp
    return step, RoundStep(**fields, micro_batches=pp, micro_tokens=budget)


def test_a_round_of_decodes_is_one_micro_batchs_step_at_its_share():
    step, rounds = _steps()
    kw = dict(prefill_tokens=0, pairs=0.0)
    assert np.isclose(rounds.gpu_s(decodes=60, context=60 * 9000.0, sampled=60, **kw),
                      step.gpu_s(decodes=30, context=30 * 9000.0, sampled=30, **kw))


def test_the_fuller_micro_batch_sets_the_round():
    """A prompt chunk in one micro-batch: the round lasts that micro-batch's step, not half the round's work."""
    step, rounds = _steps()
    chunk, pairs = 600, 600 * 4000.0
    got = rounds.gpu_s(decodes=40, context=40 * 9000.0, prefill_tokens=chunk, pairs=pairs, sampled=41)
    fuller = step.gpu_s(decodes=20, context=20 * 9000.0, prefill_tokens=chunk, pairs=pairs, sampled=21)
    even = step.gpu_s(decodes=20, context=20 * 9000.0, prefill_tokens=chunk // 2, pairs=pairs / 2, sampled=21)
    assert np.isclose(got, fuller) and got > 1.3 * even
    # the micro-batch's budget bounds the chunk it takes: the rest goes to the other micro-batch
    full = rounds.gpu_s(decodes=40, context=40 * 9000.0, prefill_tokens=1800, pairs=1800 * 4000.0, sampled=41)
    assert np.isclose(full, step.gpu_s(decodes=20, context=20 * 9000.0, prefill_tokens=1004,
                                       pairs=1004 * 4000.0, sampled=21))


def test_pooled_load_holds_the_instances_requests():
    load = Load(kind="rate", num_requests=300, input_len=100, output_len=50, rate_per_s=2.0)
    pooled = pooled_load(load, 2)
    assert (pooled.num_requests, pooled.rate_per_s) == (600, 4.0)


def test_decodes_beside_a_prompt_wait_for_its_micro_batch():
    """At the v5.0 B200 405B Server rate a stream's decodes no longer step at their own pace beside a micro-batch
    with a prompt chunk: the mean TPOT rises (the run's TPOT was priced 36% low as streams), one stream's share of
    requests comes back, and the same deployment at pp 1 is priced as before (no rounds)."""
    case = _case()
    dep, load = case.deployment, replace(case.load, num_requests=400)
    rounds = run_serving(dep, load)
    assert len(rounds.trace.arrival_s) == 400
    streams = run_serving(replace(dep, runtime=_no_micro_batch_bound(dep.runtime)), load)
    assert metric_value(rounds.trace, "tpot_mean") > 1.15 * metric_value(streams.trace, "tpot_mean")


def _no_micro_batch_bound(runtime):
    """The runtime with its engine's micro-batches not bounded each by its limits (SGLang's split): no rounds."""
    return replace(runtime, serving=replace(runtime.serving, pp_seqs_per_micro_batch=False))


def test_a_rounds_graphs_pad_each_micro_batch():
    """600 decodes over 2 micro-batches are 300 each, padded to the 384 graph: 768 rows a round (its fuller
    micro-batch 384), not the 600 padded to 1024 as one batch; 1,500 (750 each) still replay a 1,024 graph."""
    from autotune.cost.graph_padding import padded_batch
    from autotune.cost.serving_pp_rounds import round_schedule
    from autotune.cost.serving_run import Schedule

    sched = Schedule(scheduler="mixed", chunked_prefill=True, prefill_chunk_tokens=0, max_num_seqs=1024,
                     max_num_batched_tokens=2048, kv_capacity_tokens=10**6, kv_block_tokens=32,
                     kv_reservation="grow", decode_graph_max_batch=1024, decode_graph_sizes=(128, 256, 384, 512, 1024))
    rounds = round_schedule(sched, 2)
    assert padded_batch(600, rounds.decode_graph_sizes) == 768
    assert 1500 <= rounds.decode_graph_max_batch and padded_batch(1500, rounds.decode_graph_sizes) == 2048
    assert (rounds.max_num_seqs, rounds.max_num_batched_tokens, rounds.prefill_chunk_tokens) == (2048, 4096, 2048)
