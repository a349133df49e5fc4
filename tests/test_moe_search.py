"""MoE plans: the search picks expert parallelism, plans round-trip, evaluate --ep/--etp."""

import subprocess
import sys

import pytest

import autotune
from autotune.plan.plan import Plan
from autotune.search.choices import choice_values
from autotune.search.space import load_space
from autotune.spec.hardware_data import load_cluster
from autotune.spec.workload import TrainingWorkload
from moe_models import MIXTRAL_8X7B


@pytest.fixture(scope="module")
def mixtral_16():
    """Mixtral-8x7B searched on 16 GPUs (two nodes), shared by the tests that read the result (a
    search of 64 GPUs checked the same in 50 s of the suite's time)."""
    return autotune.search(MIXTRAL_8X7B, 16, cache=False)


def test_mixtral_searches_to_expert_parallelism_that_fits(mixtral_16):
    result = mixtral_16
    est = result.estimate
    assert est.fits
    assert all(s.ep > 1 for s in result.plan.stages)
    assert all(MIXTRAL_8X7B.num_experts % s.ep == 0 for s in result.plan.stages)
    assert est.breakdown["ep_comm_s"] > 0
    from autotune.outputs.report import plan_table
    header, first = plan_table(result.plan, est)[:2]
    assert header.split()[6:8] == ["ep", "etp"] and first.split()[6] == str(result.plan.stages[0].ep)
    # without expert parallelism every GPU holds all 46.7B parameters' experts: it cannot fit one stage
    single = autotune.evaluate(MIXTRAL_8X7B, 16, tp=1, pp=1, micro_batch=1, recompute="full", zero=1)
    assert not single.fits


def test_plan_json_round_trip_keeps_ep_and_etp(mixtral_16):
    result = mixtral_16
    again = Plan.from_json(result.plan.to_json())
    assert again == result.plan
    assert [s.ep for s in again.stages] == [s.ep for s in result.plan.stages]


def test_expert_choices_only_for_moe_models():
    space, cluster = load_space("default"), load_cluster("dgx-h100")
    w = TrainingWorkload(global_batch=64, seq_len=1024)
    moe = choice_values(space, MIXTRAL_8X7B, w, cluster, model_parallel=2, dp=8)
    assert moe["ep"] == [8, 4, 2, 1] and moe["etp"] == [1, 2]
    dense = MIXTRAL_8X7B.with_changes(num_experts=0, num_experts_per_token=0)
    assert "ep" not in choice_values(space, dense, w, cluster, model_parallel=2, dp=8)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True)


@pytest.mark.parametrize("flags, field", [(["--ep", "3"], "stage.ep"), (["--ep", "8", "--etp", "4"], "stage.ep")])
def test_evaluate_refuses_expert_degrees_that_do_not_fit_the_stage(flags, field):
    out = _cli("evaluate", "--model", "large", "--gpus", "16", *flags)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and field in out.stderr


def test_evaluate_refuses_ep_on_a_dense_model():
    out = _cli("evaluate", "--model", "large", "--gpus", "16", "--ep", "2")
    assert out.returncode == 2 and "no experts" in out.stderr


def test_evaluate_with_a_measured_imbalance_is_slower():
    import json

    args = ["evaluate", "--model", "mixtral-8x7b", "--gpus", "16", "--pp", "2", "--ep", "8", "--recompute", "full",
            "--zero", "1", "--json"]
    plain, skewed = _cli(*args), _cli(*args, "--expert-load-imbalance", "1.5")
    assert plain.returncode == 0 and skewed.returncode == 0, plain.stderr + skewed.stderr
    a, b = json.loads(plain.stdout), json.loads(skewed.stdout)
    assert b["step_time_s"] > a["step_time_s"] and b["breakdown"]["ep_comm_s"] > a["breakdown"]["ep_comm_s"]
    assert a["model"]["num_parameters"] == 46_702_792_704
