"""The uniform search's 1F1B pass with each class raised by its members' least step tail
(autotune.search.tailed) answers as the pass that takes classes at their floors without tails
(UniformSearch._best_pipeline_in_order, the exhaustive method's), slice by slice, with and
without a plan to prune above."""

import math

import pytest

from autotune.search import tailed
from autotune.search.driver import SearchProblem, SliceSearch
from autotune.search.space import load_space
from autotune.spec.presets import resolve_model
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import resolve_runtime

# (model, GPUs, cluster, global batch): a deep pipeline of a small model (the warm loop's), and
# one whose memory binds (classes refined per way of recomputing)
CASES = [("large", 1024, "dgx-h100", None), ("large", 96, "dgx-h100", None), ("gpt3-6.7b", 8, "dgx-a100-40gb", 64)]


def _slice_search(name: str, gpus: int, cluster: str, global_batch: int | None) -> SliceSearch:
    model, runtime = resolve_model(name), resolve_runtime(None)
    workload = training_workload(model, global_batch=global_batch, seq_len=None, dtype="bf16",
                                 attention=runtime.attention_impl)
    problem = SearchProblem(model=model, workload=workload, runtime=runtime, cluster=resolve_cluster(cluster, None),
                            gpus=gpus, space=load_space(runtime.space))
    return SliceSearch(problem)


def _answer(best) -> tuple | None:
    return None if best is None else (best[0], best[1])


@pytest.mark.parametrize("name, gpus, cluster, global_batch", CASES)
def test_tailed_pass_answers_as_the_pass_without_tails(name, gpus, cluster, global_batch):
    search = _slice_search(name, gpus, cluster, global_batch)
    uniform = search.uniform
    keys = search.keys[:: max(1, len(search.keys) // 5)]
    plain = {key: _answer(uniform._best_pipeline_in_order(key, math.inf)) for key in keys}
    found = sorted(answer[0] for answer in plain.values() if answer is not None)
    assert found, "some slice has a plan"
    # no plan yet; a plan between the slices' bests; one just below the best (the pass without tails
    # then stops at its floors: its answer is the least of the members it reached, or none); the
    # tailed pass answers none where that answer scores above the bar (the slice cannot win)
    for bar in (math.inf, found[len(found) // 2], found[0] * (1 - 1e-3), found[-1] * 0.99, found[len(found) // 3]):
        for key in keys:
            want = plain[key] if bar == math.inf else _answer(uniform._best_pipeline_in_order(key, bar))
            want = want if want is not None and want[0] <= bar else None
            assert _answer(tailed.best_pipeline(uniform, key, bar)) == want, (key, bar)


def test_least_tail_is_below_every_plans_largest_tail():
    """The raise is a floor: no plan of any member of a class has a largest step tail below it
    (a plan's is at least its first stage's and its last's; and it raises nothing until the
    class's members are priced: that would price tables the search may never need)."""
    search = _slice_search("large", 1024, "dgx-h100", None)
    uniform = search.uniform
    key = search.keys[len(search.keys) // 2]
    b = search.micro_batches(key.dp).index(key.micro_batch)
    for mp, stages in uniform.screens.submeshes(key.dp):
        for rep in uniform.screens.classes(key.dp, mp):
            assert tailed.least_tail_s(uniform, key, mp, stages, rep) == 0.0
            members = uniform.members(key.dp, mp, stages, rep).values()  # the raise reads priced members only
            least = tailed.least_tail_s(uniform, key, mp, stages, rep)
            assert least > 0  # a step has a tail (gradient sync and optimizer)
            ends = [(slice(-1, None), 3)] if stages == 1 else [(slice(1, uniform.num_layers - stages + 2), p) for p in (1, 2)]
            for costs in members:
                by_end = []  # the least tail a plan's first (or only) stage, and its last, can have
                for layers, position in ends:
                    rows, tails = costs.time_s[b, layers, position], costs.tail_s[b, layers, position]
                    by_end.append(min((t for t, ok in zip(tails, rows) if math.isfinite(ok) and math.isfinite(t)),
                                      default=math.inf))
                assert max(by_end) >= least
