"""Each runtime searches its own space, rich where the runtime can run the choices (issue 28)."""

from __future__ import annotations

import pytest

import autotune
from autotune.search.choices import choice_values
from autotune.search.driver import runtime_space
from autotune.search.space import load_space
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import load_runtime


def _space(runtime: str):
    run = load_runtime(runtime)
    return runtime_space(load_space(run.space), run)


def test_the_megatron_space_offers_fp8_and_block_recomputation_and_keeps_a_narrow_twin():
    space = _space("megatron")
    assert set(space.fp8) == {False, True} and space.recompute_layers == ("all",) and space.uniform_stages
    assert space.zero == (0, 1) and _space("nemo").zero == (0, 1, 3)  # what each runtime runs (zero_stages)
    basic = load_space("megatron-basic")
    assert basic.fp8 == (False,) and basic.recompute_layers == () and basic.zero == (0, 1)
    model = load_preset("llama3-8b")
    work = training_workload(model, global_batch=64)
    on_h100 = choice_values(space, model, work, resolve_cluster("dgx-h100"), 8, 2)
    assert on_h100["fp8"] == [False, True] and on_h100["recompute_layers"][:3] == [0, 1, 2]
    assert "fp8" not in choice_values(space, model, work, resolve_cluster("dgx-a100-80gb"), 8, 2)  # no FP8 rate


def test_searched_plans_exchange_context_parallel_blocks_as_their_runtime_does():
    assert _space("torchtitan").cp_comm == ("all_gather",) and _space("megatron").cp_comm == ("ring",)
    result = autotune.search("llama3-8b", 16, runtime="torchtitan", global_batch=16, seq_len=8192, baselines=False)
    assert {s.cp_comm for s in result.plan.stages} == {"all_gather"}


@pytest.mark.parametrize("runtime", ["megatron", "torchtitan", "deepspeed", "nemo"])
def test_each_runtime_plans_in_its_own_uniform_space(runtime):
    result = autotune.search("small", 8, runtime=runtime, baselines=False, cache=False)
    stages = result.plan.stages
    run = load_runtime(runtime)
    assert all(s.zero in run.zero_stages for s in stages)
    assert len({(s.tp, s.cp, s.zero, s.recompute, s.fp8) for s in stages}) == 1  # one choice for every stage
