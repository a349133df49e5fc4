"""The plan cache (autotune.search.cache.PLAN_CACHE): a repeated query is a lookup, another GPU
count reuses intra-op studies, and no change of the inputs ever returns what was computed for
other inputs, even when the changed input keeps its name (a model, cluster or space file that
says "small", "dgx-h100" or "default" with other contents)."""

from __future__ import annotations

import dataclasses
import tomllib
from importlib import resources

import pytest
import tomli_w

from autotune.search.cache import PLAN_CACHE
from autotune.search.api import search
from autotune.spec.presets import resolve_model

BASE = {"model": "small", "gpus": 4}


@pytest.fixture(autouse=True)
def empty_cache():
    PLAN_CACHE.clear()
    yield
    PLAN_CACHE.clear()


def same_answer(a, b) -> bool:
    return a.plan == b.plan and a.estimate.step_time_s == b.estimate.step_time_s


def test_a_repeated_query_returns_the_cached_result():
    first = search(**BASE)
    hits, misses = PLAN_CACHE.hits, PLAN_CACHE.misses
    assert search(**BASE) is first
    assert search(resolve_model("small"), 4) is first  # keyed by content: an equal spec object hits too
    assert (PLAN_CACHE.hits, PLAN_CACHE.misses) == (hits, misses)  # not even a study was looked up


def test_another_gpu_count_reuses_intra_op_studies_and_gets_the_fresh_answer():
    search("small", 4)
    hits = PLAN_CACHE.hits
    reused = search("small", 8)
    assert PLAN_CACHE.hits > hits, "no intra-op study of 4 GPUs was reused for 8"
    PLAN_CACHE.clear()
    assert same_answer(reused, search("small", 8, cache=False))


def _cluster_file(tmp_path, bandwidth_factor: float):
    """A cluster file named dgx-h100 whose NVLink is ``bandwidth_factor`` times the preset's."""
    table = tomllib.loads(resources.files("autotune.data").joinpath("clusters.toml").read_text())["dgx-h100"]
    table["intra_node"]["bandwidth"] *= bandwidth_factor
    path = tmp_path / "dgx-h100.toml"
    path.write_text(tomli_w.dumps(table))
    return str(path)


def _slower_gemm_profile(factor: float) -> dict:
    """A measured-profile dict of the H100 whose bf16 GEMMs are ``factor`` times slower."""
    device = tomllib.loads(resources.files("autotune.data").joinpath("devices", "h100-sxm.toml").read_text())
    device["regressions"]["gemm"]["bf16"]["seconds_per_flop"] *= factor
    return {"schema": "autotune.profile/1", "device": device}


def _space_file(tmp_path):
    """A space file named default whose micro-batches are only 1 (the shipped one has 1-16)."""
    table = tomllib.loads(resources.files("search_spaces").joinpath("default.toml").read_text())
    table["global"]["micro_batch"] = [1]
    path = tmp_path / "default.toml"
    path.write_text(tomli_w.dumps(table))
    return str(path)


# name -> (the changed search arguments, whether the answer must differ from the base's)
VARIANTS = {
    "model": (lambda tmp: {"model": dataclasses.replace(resolve_model("small"), num_layers=8)}, True),
    "seq_len": (lambda tmp: {"seq_len": 256}, True),
    "global_batch": (lambda tmp: {"global_batch": 32}, True),
    "dtype": (lambda tmp: {"dtype": "fp32"}, True),
    "cluster": (lambda tmp: {"cluster": _cluster_file(tmp, 0.05)}, True),
    "profile": (lambda tmp: {"profile": _slower_gemm_profile(3.0)}, True),
    "space": (_space_file, True),
    "seed": (lambda tmp: {"seed": 7}, False),  # another seed may find the same optimum
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_changed_inputs_never_get_a_result_computed_for_other_inputs(name, tmp_path):
    make, must_differ = VARIANTS[name]
    changed = make(tmp_path) if name != "space" else {"space": make(tmp_path)}
    base = search(**BASE)
    before = set(PLAN_CACHE._studies)  # tables made for the base inputs (a search also reuses its own)
    reused = []
    real = PLAN_CACHE.study
    PLAN_CACHE.study = lambda key: (reused.append(key) if key in before else None) or real(key)
    try:
        through_cache = search(**{**BASE, **changed})
    finally:
        del PLAN_CACHE.study
    assert through_cache is not base
    assert not [k for k in reused if real(k) is not None], f"tables made for other inputs were reused after changing {name}"
    PLAN_CACHE.clear()
    fresh = search(**{**BASE, **changed}, cache=False)
    assert same_answer(through_cache, fresh)
    if must_differ:  # so that a stale cache entry would have shown
        assert not same_answer(fresh, base), f"changing {name} does not change the answer; pick another change"
