"""The rich search space: partial recomputation (first N layers of a stage), FP8 on/off and
activation offload per stage; their pricing, their exports, and the default search (counts
scored vectorised) against the exhaustive one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.outputs.export import export_plan
from autotune.plan.builders import uniform_plan
from autotune.plan.io import PlanFile
from autotune.plan.plan import StagePlan
from autotune.search import api as search_api
from autotune.search.choices import StageChoice, choice_values
from autotune.search.driver import SearchProblem, SliceSearch
from autotune.search.intra_op import IntraOpResult, with_partial_recompute
from autotune.search.members import count_costs
from autotune.search.space import load_space
from autotune.search.tables import choice_costs
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import Runtime

NEUTRAL = Runtime(name="neutral")  # runs every plan of the rich space, priced as before runtimes


def test_rich_space_loads_with_every_knob():
    space = load_space("rich")
    assert space.recompute_layers == ("all",) and "full" in space.recompute
    assert set(space.fp8) == {False, True}
    assert {0, 1, 2, 3} <= set(space.zero) and "node" in space.sharding and "keep" in space.sharding
    assert "activations" in space.offload and max(space.ep) > 1


_SPACE = """[global]
micro_batch = [1]
vpp = [1]
[stage]
tp = [1]
cp = [1]
sequence_parallel = ["auto"]
zero = [0]
mesh_order = ["tp-cp-dp"]
{stage}
[pipeline]
max_stages = 4
max_units_for_uneven_submeshes = 4
[optuna]
n_trials = 4
"""


@pytest.mark.parametrize("stage, message", [
    ('recompute = ["full"]\nrecompute_layers = "some"', "recompute_layers"),
    ('recompute = ["full"]\nrecompute_layers = [0]', "recompute_layers"),
    ('recompute = ["none"]\nrecompute_layers = [4]', "full"),
    ('recompute = ["none"]\nfp8 = ["yes"]', "fp8"),
])
def test_bad_rich_knobs_are_refused(tmp_path, stage, message):
    path = tmp_path / "bad.toml"
    path.write_text(_SPACE.format(stage=stage))
    with pytest.raises(AutotuneError, match=message):
        load_space(str(path))
    path.write_text(_SPACE.format(stage='recompute = ["full"]\nrecompute_layers = [2, 4]\nfp8 = [false, true]'))
    assert load_space(str(path)).recompute_layers == (2, 4)


def test_stage_recompute_layers_is_validated():
    with pytest.raises(AutotuneError, match="recompute_layers"):
        StagePlan(layers=(0, 4), has_embedding=True, has_head=True, num_gpus=1, tp=1, cp=1, dp=1, recompute_layers=2)
    with pytest.raises(AutotuneError, match="recompute_layers"):
        StagePlan(layers=(0, 4), has_embedding=True, has_head=True, num_gpus=1, tp=1, cp=1, dp=1, recompute="full",
                  recompute_layers=-1)


def _evaluate(model: str, cluster: str, dtype: str = "bf16", **stage):
    spec = load_preset(model)
    work = training_workload(spec, global_batch=64, dtype=dtype)
    plan = uniform_plan(num_layers=spec.num_layers, gpus=8, tp=2, pp=2, micro_batch=4, global_batch=64,
                        sequence_parallel=True, **stage)
    return evaluate_plan(spec, work, resolve_cluster(cluster, None).for_gpus(8), plan, runtime=NEUTRAL)


def test_partial_recomputation_costs_its_share_of_full_recomputation():
    none, full = _evaluate("large", "dgx-h100"), _evaluate("large", "dgx-h100", recompute="full")
    half = _evaluate("large", "dgx-h100", recompute="full", recompute_layers=9)  # 9 of each stage's 18
    assert none.step_time_s < half.step_time_s < full.step_time_s
    assert half.step_time_s == pytest.approx((none.step_time_s + full.step_time_s) / 2, rel=0.02)
    assert full.peak_memory_bytes_per_gpu < half.peak_memory_bytes_per_gpu < none.peak_memory_bytes_per_gpu
    every = _evaluate("large", "dgx-h100", recompute="full", recompute_layers=18)
    assert every.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)


def test_an_fp8_stage_is_priced_as_the_fp8_recipe():
    stage_fp8 = _evaluate("llama3-8b", "dgx-h100", fp8=True)
    recipe = _evaluate("llama3-8b", "dgx-h100", dtype="fp8")
    assert stage_fp8.step_time_s == pytest.approx(recipe.step_time_s, rel=1e-9)
    assert stage_fp8.step_time_s != pytest.approx(_evaluate("llama3-8b", "dgx-h100").step_time_s, rel=1e-3)
    with pytest.raises(AutotuneError, match="FP8"):
        _evaluate("small", "dgx-a100-80gb", fp8=True)


def _problem(model: str, gpus: int, cluster: str = "dgx-h100", global_batch: int = 16) -> SearchProblem:
    spec = load_preset(model)
    return SearchProblem(model=spec, workload=training_workload(spec, global_batch=global_batch), runtime=NEUTRAL,
                         cluster=resolve_cluster(cluster, None), gpus=gpus, space=load_space("rich"))


def test_rich_choices_offer_counts_fp8_and_offload_where_allowed():
    h100 = _problem("small", 2)
    values = choice_values(h100.space, h100.model, h100.workload, h100.cluster, 2, 1)
    assert values["recompute_layers"] == list(range(h100.model.num_layers))
    assert values["fp8"] == [False, True] and "activations" in values["offload"]
    a100 = _problem("small", 2, "dgx-a100-80gb")
    assert "fp8" not in choice_values(a100.space, a100.model, a100.workload, a100.cluster, 2, 1)


def test_vectorised_counts_equal_the_cost_model():
    search = SliceSearch(_problem("small", 2))
    ctx = search._slice_context(1)
    full = choice_costs(ctx, StageChoice(tp=2, cp=1, sequence_parallel=True, recompute="full", zero=0,
                                         mesh_order="tp-cp-dp", fp8=True))
    none = choice_costs(ctx, replace(full.choice, recompute="none"))
    for k in (3, 7):
        derived = count_costs(none, full, k)
        assert derived.choice.recompute_layers == k
        direct = choice_costs(ctx, derived.choice)
        for name in ("time_s", "tail_s", "mem_base_bytes", "mem_per_microbatch_bytes"):
            np.testing.assert_allclose(getattr(derived, name)[:, k + 1:], getattr(direct, name)[:, k + 1:], rtol=1e-9)
            assert np.all(np.isinf(getattr(derived, name)[:, :k + 1]))  # every layer: plain full recomputation


def test_counts_reduced_in_blocks_equal_their_tables_reduced_at_once(monkeypatch):
    """best_by_inflight with (full, none) pairs standing for every count picks what it picks from
    every count's table made and stacked, blocks of counts or not."""
    from autotune.search import tables

    search = SliceSearch(_problem("small", 2))
    ctx = search._slice_context(1)
    study = with_partial_recompute(ctx, IntraOpResult(model_parallel=2, dp=1, costs=tuple(
        choice_costs(ctx, StageChoice(tp=t, cp=2 // t, sequence_parallel=t > 1, recompute=r, zero=0, mesh_order="tp-cp-dp"))
        for t in (1, 2) for r in ("selective", "full")), num_trials=4), list(range(1, 12)))
    assert len(study.pairs) == 2 and len(study.costs) == 6  # two twins priced
    made = list(study.costs) + [count_costs(study.costs[none], study.costs[full], k)
                                for full, none in study.pairs for k in study.counts]
    need = np.concatenate([(c.mem_base_bytes[0] + c.mem_per_microbatch_bytes[0]).ravel() for c in made])
    picked_counts = False
    for block in (1 << 22, 40):
        monkeypatch.setattr(tables, "_COUNT_BLOCK_ELEMENTS", block)
        for cap in [*np.quantile(need[np.isfinite(need)], [0.2, 0.4, 0.6]), 1e30]:  # counts win where none does not fit
            streamed = tables.best_by_inflight(list(study.costs), 0, 8, 8, cap, study.pairs, study.counts)
            whole = tables.best_by_inflight(made, 0, 8, 8, cap)
            for a, b in zip(streamed, whole):
                np.testing.assert_array_equal(a, b)
            index = streamed[2]
            assert all(study.choice(int(i)) == made[int(i)].choice for i in np.unique(index[index >= 0]))
            picked_counts |= bool((index >= len(study.costs)).any())
    assert picked_counts


@pytest.mark.parametrize("model, gpus, batch", [("small", 1, 16), ("gpt3-125m", 2, 16)])
def test_default_search_on_the_rich_space_equals_exhaustive(model, gpus, batch):
    default = search_api.search(model, gpus, global_batch=batch, space="rich", runtime=NEUTRAL, cache=False)
    exhaustive = search_api.search(model, gpus, global_batch=batch, space="rich", runtime=NEUTRAL, method="exhaustive",
                                   cache=False)
    assert default.estimate.step_time_s == pytest.approx(exhaustive.estimate.step_time_s, rel=1e-9)
    assert exhaustive.stats.num_trials > default.stats.num_trials


def _partial_plan_file(counts: tuple[int, int], fp8: bool = False, zero: int = 1) -> PlanFile:
    spec = load_preset("llama3-8b")
    work = training_workload(spec, global_batch=64)
    plan = uniform_plan(num_layers=spec.num_layers, gpus=16, tp=2, pp=2, micro_batch=1, global_batch=64,
                        sequence_parallel=True, recompute="full", fp8=fp8, zero=zero)
    stages = tuple(replace(s, recompute_layers=k) for s, k in zip(plan.stages, counts))
    return PlanFile(plan=plan.with_changes(stages=stages), model=spec, workload=work, cluster="dgx-h100")


def test_partial_recomputation_exports():
    megatron = export_plan(_partial_plan_file((4, 4), fp8=True), "megatron")
    assert "--recompute-method block" in megatron and "--recompute-num-layers 4" in megatron
    assert "--fp8-format hybrid" in megatron
    toml = export_plan(_partial_plan_file((4, 4), zero=3), "torchtitan-0.2")  # 16 layers a stage: every 4th block
    assert 'selective_ac_option = "4"' in toml and 'mode = "selective"' in toml
    with pytest.raises(AutotuneError, match="recompute_layers"):
        export_plan(_partial_plan_file((4, 5)), "megatron")
    with pytest.raises(AutotuneError, match="recompute_layers"):
        export_plan(_partial_plan_file((6, 6), zero=3), "torchtitan-0.2")  # no f with 16 // f == 6
    with pytest.raises(AutotuneError, match="recompute_layers"):  # torchtitan 0.3 has no frequency option here
        export_plan(_partial_plan_file((4, 4), zero=3), "torchtitan")


def _evaluate_cli(*flags: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "autotune", "evaluate", "--model", "large", "--gpus", "16", "--tp", "4",
                           "--pp", "2", "--micro-batch", "4", "--json", *flags], capture_output=True, text=True, timeout=120)


def test_evaluate_takes_recompute_layers_as_megatron_block_recomputation():
    import json

    step = {}
    for flags in (("--recompute", "none"), ("--recompute", "full", "--recompute-layers", "8"), ("--recompute", "full")):
        out = _evaluate_cli(*flags)
        assert out.returncode in (0, 1), out.stderr
        step[flags[-1]] = json.loads(out.stdout)["step_time_s"]
    assert step["none"] < step["8"] < step["full"]  # a share of the layers pays the extra forward
    bad = _evaluate_cli("--recompute-layers", "8")
    assert bad.returncode == 2 and "recompute_layers" in bad.stderr and "Traceback" not in bad.stderr
