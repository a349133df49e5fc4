"""A slice's class floors from screens (Screens.class_floors) are made with those of its other
classes whose screens are ready, in one pass, and kept until asked: each class's floors are the
numbers a call for that class alone gives, the extra classes' screens come from tables priced
already (none priced for them), and a warm process's search (the plan cache holding another GPU
count's tables) makes them for classes it never priced itself."""

import pytest

from autotune.search.cache import PlanCache
from autotune.search.driver import SearchProblem, SliceSearch
from autotune.search.space import load_space
from autotune.spec.presets import resolve_model
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import resolve_runtime


def _slice_search(gpus: int, cache: PlanCache | None) -> SliceSearch:
    model, runtime = resolve_model("large"), resolve_runtime(None)
    workload = training_workload(model, global_batch=None, seq_len=None, dtype="bf16", attention=runtime.attention_impl)
    problem = SearchProblem(model=model, workload=workload, runtime=runtime, cluster=resolve_cluster("dgx-h100", None),
                            gpus=gpus, space=load_space(runtime.space))
    return SliceSearch(problem, cache=cache)


def _slices(search: SliceSearch):
    """(slice, submesh, stages, classes) of a few slices, the deep pipelines' submeshes first."""
    uniform = search.uniform
    for key in search.keys[:: max(1, len(search.keys) // 4)]:
        for mp, stages in sorted(uniform.screens.submeshes(key.dp), key=lambda pair: -pair[1])[:2]:
            yield key, mp, stages, list(uniform.screens.classes(key.dp, mp))


@pytest.mark.parametrize("memory", [True, False])
def test_batched_floors_are_each_class_alone(memory):
    cache = PlanCache()
    _slice_search(1024, cache).solve_slice(_slice_search(1024, cache).keys[0])  # tables in the cache
    batched, alone = _slice_search(1024, cache), _slice_search(1024, cache)
    checked = 0
    for key, mp, stages, reps in _slices(batched):
        shape = batched.uniform._shape(key, stages, batched.uniform._chunks(key, stages))
        for rep in reps:  # one class at a time, as the search asks: the others come from what is kept
            want = alone.uniform.screens._class_floors(key, mp, [rep], shape, memory)
            assert batched.uniform.screens.class_floors(key, mp, [rep], shape, memory) == want, (key, mp, rep)
            checked += 1
        assert batched.uniform.screens.class_floors(key, mp, reps[::-1], shape, memory) == [
            alone.uniform.screens._class_floors(key, mp, [rep], shape, memory)[0] for rep in reps[::-1]]
    assert checked > 10


def test_extra_classes_price_no_table():
    """Classes made beside the one asked for read cached tables only: a search prices as many tables
    as one asking for that class alone does, each beside a plan cache holding the same tables
    (another GPU count's, made into each by the same search)."""
    caches = PlanCache(), PlanCache()
    for cache in caches:
        first = _slice_search(512, cache)
        for key in first.keys:
            first.solve_slice(key)
    later, reference = _slice_search(1024, caches[0]), _slice_search(1024, caches[1])
    made_extra = False
    for key, mp, stages, reps in _slices(later):
        shape = later.uniform._shape(key, stages, later.uniform._chunks(key, stages))
        before = (later.num_trials, reference.num_trials)
        later.uniform.screens.class_floors(key, mp, reps[:1], shape, memory=True)
        reference.uniform.screens._class_floors(key, mp, reps[:1], shape, memory=True)
        assert later.num_trials - before[0] == reference.num_trials - before[1]
        made_extra |= len(later.uniform.screens._floors[(key, mp, shape, True)]) > 1
    assert made_extra, "another GPU count's tables let some slice make more classes than it asked for"
