"""The plan study as a person reads it in optuna-dashboard, opened with Optuna's own API: no
stand-in values (a slice where nothing fits is infeasible by an Optuna constraint, or FAIL when
no plan was built), and each slice's winning plan choices as parameters and user attributes."""

from __future__ import annotations

import json
import math

import optuna
import pytest
from optuna.trial import TrialState

from autotune.cost.evaluate import evaluate_plan
from autotune.spec.runtime import load_runtime
from autotune.plan.builders import uniform_plan
from autotune.search.driver import SliceKey, SliceOutcome
from autotune.search.store import CONSTRAINTS_KEY, finished_slices, open_study, record_slice, slice_history
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster, training_workload

CHOICES = ("tp", "cp", "zero", "recompute", "pp", "vpp", "schedule", "sequence_parallel", "offload")


def _outcome(gpus: int, **degrees) -> SliceOutcome:
    model = load_preset("llama3-8b")
    work = training_workload(model, global_batch=64, seq_len=2048)
    plan = uniform_plan(num_layers=model.num_layers, gpus=gpus, global_batch=64, has_embeddings=True, **degrees)
    estimate = evaluate_plan(model, work, resolve_cluster("dgx-h100"), plan, runtime=load_runtime("megatron"))
    return SliceOutcome(key=SliceKey(plan.dp, plan.micro_batch), plan=plan, estimate=estimate, lower_bound_s=0.0)


def test_slices_record_infeasible_and_failed_not_a_stand_in_value(tmp_path):
    study = open_study(f"sqlite:///{tmp_path / 's.db'}", "s", problem={"p": 1})
    fits = _outcome(8, tp=8, zero=1, recompute="full")
    too_big = _outcome(1, micro_batch=2)  # Llama 3 8B with Adam on one 80 GB GPU: does not fit
    assert fits.estimate.fits and not too_big.estimate.fits
    none = SliceOutcome(key=SliceKey(2, 1), plan=None, estimate=None, lower_bound_s=0.0)
    for outcome in (fits, too_big, none):
        record_slice(study, outcome)
    ok, infeasible, failed = study.get_trials()
    assert ok.state == infeasible.state == TrialState.COMPLETE and failed.state == TrialState.FAIL
    assert ok.system_attrs[CONSTRAINTS_KEY][0] <= 0 < infeasible.system_attrs[CONSTRAINTS_KEY][0]
    over_gib = (too_big.estimate.peak_memory_bytes_per_gpu - too_big.estimate.memory_capacity_bytes) / 2**30
    assert infeasible.system_attrs[CONSTRAINTS_KEY] == [pytest.approx(over_gib)]
    assert infeasible.value == pytest.approx(too_big.estimate.step_time_s) and infeasible.value < 1e6
    assert failed.value is None and failed.user_attrs["no_fit_reason"]
    assert ok.params["tp"] == 8 and ok.params["recompute"] == "full" and ok.user_attrs["zero"] == 1
    assert [v for _, v in slice_history(study)] == [pytest.approx(fits.step_time_s), None, None]
    assert len(finished_slices(study)) == 3  # a resumed run does not solve them again
    # Optuna itself sees the constraint: the infeasible trial is not among the feasible ones.
    feasible = [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if all(c <= 0 for c in t.constraints.values())]
    assert [t.number for t in feasible] == [ok.number]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from autotune.search.api import search

    run_dir = tmp_path_factory.mktemp("runs") / "run"
    search("large", 16, run_dir=run_dir, cache=False, plots="none")
    return run_dir


def test_a_run_study_opens_with_optuna_and_reads_plainly(run):
    url = f"sqlite:///{run / 'study.db'}"
    (summary,) = optuna.get_all_study_summaries(url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    trials = study.get_trials()
    assert trials and all(t.value is None or (math.isfinite(t.value) and t.value < 1e4) for t in trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert complete and all(set(CHOICES) <= set(t.user_attrs) for t in complete)
    assert all({"dp", "micro_batch", "tp", "pp"} <= set(t.params) for t in complete)
    feasible = [t for t in complete if all(c <= 0 for c in t.constraints.values())]
    best = min(feasible, key=lambda t: t.value)
    chosen = json.loads((run / "plan.json").read_text())
    search_record = json.loads((run / "search.json").read_text())
    if search_record.get("source", "search") == "search":
        assert json.loads(best.user_attrs["plan"]) == chosen["plan"]
    assert best.value == pytest.approx(search_record["estimate"]["step_time_s"])
