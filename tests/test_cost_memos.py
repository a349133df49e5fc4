"""Costs kept across calls (evaluate's dense stages, an MoE layer's experts, the FP8 workload,
preset specs, spec fingerprints) give what pricing afresh gives, and never what other inputs give."""

import importlib.metadata

from autotune.cost import evaluate as evaluate_module
from autotune.cost import moe_stage
from autotune.search.cache import fingerprint
from autotune.search.evaluate import evaluate
from autotune.search.study_file import _optuna_version
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.workload import TrainingWorkload
from tests.moe_models import tiny_moe


def _fresh(price):
    """``price()`` with nothing kept from before."""
    evaluate_module._STAGE_COSTS.clear()
    moe_stage._EXPERT_COSTS.clear()
    return price()


def _same(a, b) -> None:
    assert (a.step_time_s, a.peak_memory_bytes_per_gpu, a.fits) == (b.step_time_s, b.peak_memory_bytes_per_gpu, b.fits)
    assert [s.peak_memory_bytes for s in a.stages] == [s.peak_memory_bytes for s in b.stages]
    assert a.breakdown == b.breakdown


def test_kept_dense_stage_costs_price_fp8_and_partial_recomputation_as_afresh():
    def price(recompute_layers):
        return evaluate("large", 32, pp=8, tp=2, micro_batch=1, global_batch=64, recompute="full", fp8=True,
                        recompute_layers=recompute_layers, cluster="dgx-h100")

    fresh = _fresh(lambda: price(1))
    _same(price(1), fresh)  # the stages' costs now kept
    other = price(2)  # another count of recomputed layers is priced, not taken from the first
    assert other.step_time_s != fresh.step_time_s
    _same(other, _fresh(lambda: price(2)))


def test_kept_expert_costs_price_moe_stages_as_afresh():
    workload = TrainingWorkload(global_batch=16, seq_len=128)

    def price(ep, pp):
        return evaluate(tiny_moe(), 16, pp=pp, ep=ep, micro_batch=1, workload=workload, cluster="dgx-h100")

    fresh = {(ep, pp): _fresh(lambda ep=ep, pp=pp: price(ep, pp)) for ep in (1, 2, 4) for pp in (1, 2)}
    for (ep, pp), estimate in fresh.items():  # every layout priced again with all the others' costs kept
        _same(price(ep, pp), estimate)
    assert len({e.step_time_s for e in fresh.values()}) > 1


def test_presets_are_one_object_and_fingerprints_follow_contents():
    assert load_preset("large") is load_preset("large")
    assert load_cluster("dgx-h100") is load_cluster("dgx-h100")
    model = load_preset("large")
    kept = fingerprint(model)
    assert fingerprint(model) == kept
    assert fingerprint(model.__class__(**{**vars(model), "num_layers": model.num_layers + 1})) != kept


def test_optuna_version_read_from_its_file_is_the_installed_one():
    assert _optuna_version() == importlib.metadata.version("optuna")


def test_kept_moe_stage_costs_follow_each_stages_dense_and_moe_layers():
    """Equal MoE stages share a kept cost only where they hold as many dense and MoE layers: with
    every other layer MoE, stages of three layers starting at odd and even layers differ."""
    from autotune.cost.contract import stage_cost
    from autotune.cost.evaluate import evaluate_plan
    from autotune.plan.builders import uniform_plan
    from autotune.spec.runtime import load_runtime

    model = tiny_moe(num_layers=12, first_k_dense_layers=0, moe_layer_frequency=2)
    workload, cluster = TrainingWorkload(global_batch=16, seq_len=128), load_cluster("dgx-h100")
    runtime = load_runtime("megatron")
    plan = uniform_plan(num_layers=12, gpus=32, global_batch=16, pp=4, ep=2, micro_batch=1, recompute="full",
                        has_embeddings=True)
    kept = _fresh(lambda: evaluate_plan(model, workload, cluster, plan, runtime=runtime))
    _same(evaluate_plan(model, workload, cluster, plan, runtime=runtime), kept)  # now from the kept costs
    real = evaluate_module._stage_costs
    try:  # each stage priced on its own
        evaluate_module._stage_costs = lambda ctx, stages, positions, g: [stage_cost(ctx, s, p)
                                                                          for s, p in zip(stages, positions)]
        plain = evaluate_module.evaluate_plan(model, workload, cluster, plan, runtime=runtime)
    finally:
        evaluate_module._stage_costs = real
    assert kept == plain
    middle = [s.microbatch_time_s for s in kept.stages[1:3]]  # layers 3-5 (one MoE) and 6-8 (two MoE)
    assert middle[0] != middle[1]
