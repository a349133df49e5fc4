"""autotune.search_many: a batch of queries answered as one search each would, sharing tables."""

from __future__ import annotations

import pytest

import autotune
from autotune.errors import AutotuneError
from autotune.search.cache import PLAN_CACHE


def test_answers_equal_single_searches_in_the_order_asked():
    queries = [{"model": "small", "gpus": 4}, {"model": "small", "gpus": 1}, {"model": "medium", "gpus": 2},
               {"model": "small", "gpus": 2, "global_batch": 32}]
    answers = autotune.search_many(queries, cluster="dgx-h100")
    assert [a.index for a in answers] == [0, 1, 2, 3] and [a.query for a in answers] == queries
    for answer, query in zip(answers, queries):
        alone = autotune.search(cluster="dgx-h100", cache=False, baselines=False, **query)
        assert answer.result.plan == alone.plan and answer.result.estimate.step_time_s == alone.estimate.step_time_s
        assert answer.result.baselines == () and answer.note == ""


def test_a_later_gpu_count_reuses_the_tables_priced_for_an_earlier_one():
    PLAN_CACHE.clear()
    first = autotune.search_many([{"gpus": 16}], model="large", global_batch=64)[0].result
    again = autotune.search_many([{"gpus": 32}], model="large", global_batch=64)[0].result
    PLAN_CACHE.clear()
    fresh = autotune.search("large", 32, global_batch=64, cache=False, baselines=False)
    assert again.plan == fresh.plan and again.stats.num_trials < fresh.stats.num_trials and first.stats.num_trials > 0


def test_a_query_where_nothing_fits_is_answered_with_the_reason():
    answers = autotune.search_many([{"model": "llama3-70b", "gpus": 1}, {"model": "small", "gpus": 1}],
                                   cluster="dgx-a100-80gb")
    assert answers[0].result is None and "GPUs" in answers[0].note and answers[1].result is not None
    assert answers[0].to_dict()["result"] is None and answers[1].to_dict()["query"] == {"model": "small", "gpus": 1}


@pytest.mark.parametrize("queries, field", [
    ([], "queries"), ("small", "queries"), ([{"model": "small"}], "gpus"), ([{"gpus": 4}], "model"),
    ([{"model": "small", "gpus": 0}], "gpus"), ([{"model": "small", "gpus": 4, "run_dir": "x"}], "run_dir"),
    ([{"model": "small", "gpus": 4, "colour": 1}], "colour"), (["small"], "queries"),
])
def test_bad_queries_are_refused_before_any_search(queries, field):
    with pytest.raises(AutotuneError) as err:
        autotune.search_many(queries)
    assert err.value.field == field
