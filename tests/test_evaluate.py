"""autotune.evaluate: the estimate's interface, consistency, and bad input."""

import pytest

import autotune.api as api
from autotune.cost.estimate import BREAKDOWN_KEYS, MEMORY_KEYS
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.plan.plan import Plan

REQUIRED = {"fits", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_memory_bytes_per_gpu",
            "breakdown", "memory_breakdown"}


def test_estimate_json_has_the_stable_keys_and_adds_up():
    est = api.evaluate("gpt3-13b", 64, cluster="dgx-a100-80gb", tp=8, pp=2, micro_batch=2, recompute="selective")
    data = est.to_dict()
    assert REQUIRED <= set(data)
    assert set(data["breakdown"]) == set(BREAKDOWN_KEYS) and set(data["memory_breakdown"]) == set(MEMORY_KEYS)
    assert sum(est.breakdown.values()) == pytest.approx(est.step_time_s)
    assert sum(est.memory_breakdown.values()) == pytest.approx(est.peak_memory_bytes_per_gpu)
    assert est.tokens_per_s == pytest.approx(1024 * 2048 / est.step_time_s)
    assert 0 < est.mfu < 1 and est.fits


def test_more_recomputation_costs_time_and_saves_memory():
    kwargs = dict(cluster="dgx-a100-80gb", tp=8, pp=4, micro_batch=1, attention="unfused")
    none, sel, full = (api.evaluate("gpt3-175b", 512, recompute=r, **kwargs) for r in ("none", "selective", "full"))
    assert none.step_time_s <= sel.step_time_s < full.step_time_s
    assert none.memory_breakdown["activations_bytes"] > sel.memory_breakdown["activations_bytes"] > full.memory_breakdown["activations_bytes"]


def test_zero_stages_shard_memory_and_add_traffic():
    ests = [api.evaluate("gpt3-6.7b", 64, cluster="dgx-h100", zero=z, micro_batch=4) for z in range(4)]
    peaks = [e.peak_memory_bytes_per_gpu for e in ests]
    assert peaks == sorted(peaks, reverse=True)
    assert ests[3].breakdown["dp_comm_s"] > ests[0].breakdown["dp_comm_s"]


def test_model_that_cannot_fit_says_how_much_it_needs():
    est = api.evaluate("gpt3-175b", 8, cluster="dgx-a100-80gb", tp=8)
    assert not est.fits and "GiB" in est.reason and est.peak_memory_bytes_per_gpu > 80 * 2**30


def test_interleaving_shrinks_the_bubble():
    base = dict(cluster="dgx-a100-80gb", tp=8, pp=8, micro_batch=1, global_batch=64)
    plain = api.evaluate("gpt3-175b", 64, **base)
    inter = api.evaluate("gpt3-175b", 64, vpp=3, **base)
    assert inter.breakdown["pipeline_bubble_s"] < plain.breakdown["pipeline_bubble_s"]


def test_plans_round_trip_through_json_and_rescore_identically():
    plan = uniform_plan(num_layers=96, gpus=1024, tp=8, pp=16, micro_batch=1, global_batch=1536, recompute="full")
    again = Plan.from_json(plan.to_json())
    assert again == plan
    a = api.evaluate("gpt3-175b", cluster="dgx-a100-80gb", plan=plan)
    b = api.evaluate("gpt3-175b", cluster="dgx-a100-80gb", plan=again)
    assert a.step_time_s == b.step_time_s


@pytest.mark.parametrize("kwargs, field", [
    (dict(gpus=16, tp=3), "gpus"),
    (dict(gpus=64, tp=8, pp=2, dp=2), "gpus"),
    (dict(gpus=8, tp=1, pp=1, global_batch=12, micro_batch=1), "global_batch"),
    (dict(gpus=8, tp=1, micro_batch=3), "micro_batch"),
    (dict(gpus=16, tp=16), "tp"),
    (dict(gpus=8, dtype="fp8"), "dtype"),
    (dict(gpus=8, recompute="some"), "recompute"),
    (dict(gpus=12), "gpus"),
    (dict(gpus=8, cluster="dgx-x"), "cluster"),
])
def test_bad_input_names_the_field(kwargs, field):
    kwargs.setdefault("cluster", "dgx-h100")
    with pytest.raises(AutotuneError) as err:
        api.evaluate("gpt3-13b", **kwargs)
    assert err.value.field == field


def test_tp_must_divide_kv_heads():
    with pytest.raises(AutotuneError) as err:
        api.evaluate("llama3-8b", 16, tp=16)
    assert err.value.field == "tp" and "heads" in str(err.value)
