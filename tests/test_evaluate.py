"""autotune.evaluate: the estimate's interface, consistency, and bad input."""

import pytest

import autotune as api
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
    # the transformers runtime (accelerate: DDP, DeepSpeed ZeRO 1-2, FSDP) runs every stage
    ests = [api.evaluate("gpt3-6.7b", 64, cluster="dgx-h100", zero=z, micro_batch=4, runtime="transformers") for z in range(4)]
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
    (dict(gpus=8, dtype="int4"), "dtype"),
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


def test_gpipe_holds_every_micro_batch_1f1b_only_the_pipeline_depth():
    kwargs = dict(cluster="dgx-a100-80gb", tp=8, pp=4, micro_batch=1, global_batch=64)
    one_f_one_b = api.evaluate("gpt3-13b", 32, **kwargs)
    gpipe = api.evaluate("gpt3-13b", 32, schedule="gpipe", **kwargs)
    assert gpipe.step_time_s == pytest.approx(one_f_one_b.step_time_s)  # same formula (Alpa eq. 1)
    act_1f1b = one_f_one_b.stages[0].memory_bytes["activations_bytes"]
    # dp = 1, so 64 micro-batches: GPipe keeps all 64 on stage 0, 1F1B the pipeline depth, 4
    assert gpipe.stages[0].memory_bytes["activations_bytes"] == pytest.approx(act_1f1b * 64 / 4)


def test_custom_cluster_file(tmp_path):
    (tmp_path / "mine.toml").write_text('''
device = "h100"
gpus_per_node = 4
source = "a test cluster: 4 H100 per node on a slower network"
[intra_node]
name = "nvlink"
latency_s = 6.6e-6
step_latency_s = 0.6e-6
bandwidth = 370e9
[inter_node]
name = "ethernet"
latency_s = 20e-6
step_latency_s = 10e-6
bandwidth = 12.5e9
[host_link]
name = "pcie5"
latency_s = 5e-6
step_latency_s = 0.0
bandwidth = 52e9
''')
    mine = api.evaluate("gpt3-1.3b", 16, cluster=str(tmp_path / "mine.toml"), global_batch=64)
    dgx = api.evaluate("gpt3-1.3b", 16, cluster="dgx-h100", global_batch=64)
    assert mine.breakdown["dp_comm_s"] > dgx.breakdown["dp_comm_s"]  # 12.5 GB/s Ethernet vs 47 GB/s NDR
    with pytest.raises(AutotuneError) as err:
        api.evaluate("gpt3-1.3b", 6, cluster=str(tmp_path / "mine.toml"))
    assert err.value.field == "gpus" and "multiple of 4" in str(err.value)
