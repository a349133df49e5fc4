"""`autotune evaluate --plan FILE` scores the plan with the model, workload, runtime, cluster and
profile the file records, unless a flag gives them (issue 30: it ignored the file's model and
workload, so a run's plan of a 32-sequence batch was refused against the preset's batch)."""

from __future__ import annotations

import json

import pytest

from autotune.cli.main import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A search whose workload, runtime and cluster are none of the defaults."""
    runs = tmp_path_factory.mktemp("plans") / "runs"
    assert main(["search", "--model", "small", "--gpus", "2", "--cluster", "dgx-a100-80gb", "--global-batch", "32",
                 "--seq-len", "256", "--runtime", "torchtitan", "--runs-dir", str(runs), "--plots", "none",
                 "--quiet"]) == 0
    return next(runs.iterdir())


def _evaluate(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["evaluate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_plan_file_gives_model_workload_runtime_and_cluster(run_dir, capsys):
    searched = json.loads((run_dir / "search.json").read_text())
    got = _evaluate(capsys, "--plan", str(run_dir / "plan.json"))
    assert got["from_plan_file"] == ["model", "cluster", "workload", "runtime"]
    assert got["runtime"]["name"] == "torchtitan" and got["model"]["name"] == "small"
    assert got["step_time_s"] == pytest.approx(searched["estimate"]["step_time_s"], rel=1e-9)
    assert got["assumed"] == {}  # nothing was assumed: the file said it all


def test_flags_override_the_file(run_dir, capsys):
    plan = str(run_dir / "plan.json")
    base = _evaluate(capsys, "--plan", plan)
    longer = _evaluate(capsys, "--plan", plan, "--seq-len", "512")
    assert "workload" not in longer["from_plan_file"] and longer["step_time_s"] > 1.5 * base["step_time_s"]
    h100 = _evaluate(capsys, "--plan", plan, "--cluster", "dgx-h100")
    assert "cluster" not in h100["from_plan_file"] and h100["step_time_s"] < base["step_time_s"]
    deepspeed = _evaluate(capsys, "--plan", plan, "--runtime", "deepspeed")
    assert deepspeed["runtime"]["name"] == "deepspeed" and "runtime" not in deepspeed["from_plan_file"]


def test_text_output_says_what_came_from_the_file(run_dir, capsys):
    capsys.readouterr()
    assert main(["evaluate", "--plan", str(run_dir / "plan.json")]) == 0
    out = capsys.readouterr().out
    assert f"from {run_dir / 'plan.json'}: model, cluster, workload, runtime (flags override them)" in out
    assert "runtime torchtitan" in out.splitlines()[0]


def test_without_a_plan_the_model_is_required(capsys):
    assert main(["evaluate", "--gpus", "8"]) == 2
    assert "model: give --model" in capsys.readouterr().err
