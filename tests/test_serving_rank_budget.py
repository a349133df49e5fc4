"""Whole prompts under attention DP fill each rank's own token budget (cost/serving_rank_budget.py): a rank's
decodes take one token each of its max_num_tokens, a prompt goes whole to the rank with the most left, and the
first prompt that fits no rank ends the step's admissions."""

from __future__ import annotations

from types import SimpleNamespace

from autotune.cost.serving_rank_budget import mixed_budget, rank_prompt_budget


def test_one_prompt_a_rank_where_the_pooled_budget_takes_thirteen():
    # trt1x-009's late prompt steps: 8 ranks of 2,048 tokens, 2,525 decodes (315-316 a rank)
    assert rank_prompt_budget([1000] * 20, 16384, 2525, 8) == 8 * 1000
    assert 16384 - 2525 >= 13 * 1000  # what one pooled budget would take


def test_without_decodes_two_prompts_fit_each_rank():
    assert rank_prompt_budget([1000] * 20, 16384, 0, 8) == 16 * 1000


def test_a_prompt_that_fits_no_rank_ends_admission():
    # 2 ranks of 1,000 tokens: 600 goes to rank 0, 600 to rank 1, 500 fits neither: the 100 behind it waits too
    assert rank_prompt_budget([600, 600, 500, 100], 2000, 0, 2) == 1200


def test_one_rank_is_the_pooled_budget():
    assert rank_prompt_budget([1000] * 20, 16384, 2525, 1) == 16384 - 2525


def _sched(ranks: int, chunked: bool = False):
    return SimpleNamespace(max_num_batched_tokens=16384, dp_ranks=ranks, chunked_prefill=chunked)


def test_chunked_prefill_and_single_rank_keep_the_pooled_budget():
    assert mixed_budget(_sched(8, chunked=True), 2525, iter([1000] * 20)) == 16384 - 2525
    assert mixed_budget(_sched(1), 2525, iter([1000] * 20)) == 16384 - 2525
    assert mixed_budget(_sched(8), 2525, iter([1000] * 20)) == 8000


def test_an_idle_replica_never_stalls_on_a_prompt_longer_than_a_rank():
    assert mixed_budget(_sched(8), 0, iter([5000])) == 16384  # the pooled budget, not 0
    assert mixed_budget(_sched(8), 100, iter([5000])) == 0  # decodes run; the prompt waits for room


def test_only_engines_whose_limits_sum_the_ranks_split_the_budget():
    # TensorRT-LLM's limits are each rank's summed (serving_limits.scheduling_ranks), so its ranks split the
    # replica's budget; vLLM's data-parallel ranks each hold the whole --max-num-batched-tokens (one scheduler's
    # limits), so even without chunked prefill its budget must not be divided by the ranks
    import csv
    from dataclasses import replace

    from autotune.calibrate.serving_rows import case_from_row
    from autotune.cost.serving_eval import _budget_ranks
    from autotune.spec.runtime import load_runtime

    rows = {r["id"]: r for r in csv.DictReader(open("tests/data/trtllm_pytorch_versions_check.csv", encoding="utf-8"))}
    dep = case_from_row(rows["trt1x-009"]).deployment
    assert dep.attention_dp and _budget_ranks(dep, dep.tp) == dep.tp
    vllm = load_runtime("vllm")
    vllm = vllm.with_changes(serving=vllm.serving.with_changes(chunked_prefill=False))
    assert _budget_ranks(replace(dep, runtime=vllm), dep.tp) == 1
