"""Issue 29's classes again, with cases of the kind kept back to check the fixes (found by
scripts/probe_inputs.py): each refusal is one line naming the field, exit 2, nothing written;
each pass is the right answer."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tomllib
from pathlib import Path

import pytest

import autotune
from autotune.cli.main import main
from autotune.errors import AutotuneError
from autotune.search.api import search
from test_readers import LLAMA, refused

ROOT = Path(__file__).resolve().parents[1]
DGX = tomllib.loads((ROOT / "autotune/data/clusters.toml").read_text())["dgx-h100"]
E = ["evaluate", "--model", "small", "--gpus", "8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {gpus: Path(search("small", gpus, runs_dir=root / str(gpus), plots="none").run_dir) for gpus in (8, 4)}


@pytest.fixture
def run(runs, tmp_path) -> Path:
    """A copy of the 8-GPU run in this test's directory."""
    copy = tmp_path / "RUN"
    shutil.copytree(runs[8], copy)
    return copy


def _edit(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


# ---- files the tool reads ----------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["show", "RUN"], ["show", "RUN", "--json"], ["explain", "RUN"],
                                  ["export", "RUN", "--format", "megatron"]])
def test_a_plan_file_whose_stages_miss_its_own_model_is_refused(run, tmp_path, capsys, monkeypatch, argv):
    _edit(run / "plan.json", lambda d: d["plan"]["stages"][0].update(layers=[0, 13]))  # the model has 12
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, argv, "stages: stages must cover layers [0, 12) exactly")


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(runtime=5), "runtime: must be an object"),
    (lambda d: d["runtime"].update(attention_speed="x"), "runtime.attention_speed"),
    (lambda d: d["estimate"].update(step_time_s=-1.0), "estimate.step_time_s: must be a number >= 0"),
    (lambda d: d["plan"]["stages"][0].update(tp=0), "tp: must be a positive integer"),
])
def test_show_checks_the_values_of_a_search_record_not_only_their_types(run, tmp_path, capsys, monkeypatch, edit, field):
    _edit(run / "search.json", edit)
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["show", "RUN", "--json"], field)


def test_resume_refuses_a_study_of_another_problem_in_a_finished_run(runs, run, tmp_path, capsys, monkeypatch):
    shutil.copy(runs[4] / "study.db", run / "study.db")  # the 4-GPU search's study in the 8-GPU run
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["search", "--resume", "RUN", "--plots", "none"], "holds the study of another problem")
    assert json.loads((run / "plan.json").read_text())["plan"]["gpus"] == 8


def test_resume_rebuilds_a_corrupt_search_record_from_the_study(run, tmp_path, capsys, monkeypatch):
    (run / "search.json").write_text("{")
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--resume", "RUN", "--plots", "none", "--quiet"]) == 0
    assert json.loads((run / "search.json").read_text())["plan"]["gpus"] == 8


@pytest.mark.parametrize("types, field", [
    (["full_attention"] * 3, "config.layer_types: must give one type per layer, 32"),
    (["banana"] * 32, "config.layer_types[0]: 'banana' is not valid"),
])
def test_layer_types_are_checked_as_transformers_checks_them(tmp_path, capsys, monkeypatch, types, field):
    (tmp_path / "c.json").write_text(json.dumps({**LLAMA, "model_type": "qwen3", "head_dim": 128, "layer_types": types}))
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["evaluate", "--model", "c.json", "--gpus", "8"], field)


@pytest.mark.parametrize("changes, field", [
    (dict(intermediate_size=0), "config.intermediate_size: must be a positive integer"),
    (dict(num_attention_heads=-4), "config.num_attention_heads: must be a positive integer"),
    (dict(model_type="mixtral", num_local_experts=10**9, num_experts_per_tok=2), "config.num_local_experts: 1,000,000,000"),
])
def test_config_sizes_are_named_as_the_file_names_them(tmp_path, capsys, monkeypatch, changes, field):
    (tmp_path / "c.json").write_text(json.dumps({**LLAMA, **changes}))
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["evaluate", "--model", "c.json", "--gpus", "8"], field)


@pytest.mark.parametrize("data, field", [
    ({**DGX, "bandwith": 5}, "cluster.bandwith: is not a key here"),
    ({**DGX, "intra_node": {**DGX["intra_node"], "latency": 1e-6}}, "intra_node.latency: is not a key here (did you mean latency_s"),
    ({**DGX, "gpus_per_node": 10**9}, "cluster.gpus_per_node: 1,000,000,000 is beyond any real input"),
    ({**DGX, "max_nodes": 10**9}, "cluster.max_nodes"),
])
def test_cluster_files_refuse_unknown_keys_and_absurd_counts(tmp_path, capsys, monkeypatch, data, field):
    (tmp_path / "c.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, E + ["--cluster", "c.json"], field)


def _csv(rows: int = 1, change: tuple[str, str] | None = None) -> str:
    lines = (ROOT / "tests/data/published_runs.csv").read_text().splitlines()[: rows + 1]
    text = "\n".join(lines) + "\n"
    return text.replace(*change, 1) if change else text


@pytest.mark.parametrize("kind, field", [
    ("empty", "holds no header"), ("header-only", "holds no rows"), ("fifo", "it is a FIFO"),
    ("device", "not a regular file"), ("inf-layers", "no row of"), ("nan-time", "no row of"),
    ("binary", "not UTF-8"), ("open-quote", "no row of"),  # a cell with a line break: still one line
])
def test_check_published_reads_its_csv_defensively(tmp_path, capsys, monkeypatch, kind, field):
    path = tmp_path / "r.csv"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        content = {"empty": "", "header-only": _csv(0), "inf-layers": _csv(1, ("GPT-1.7B,24,", "GPT-1.7B,inf,")),
                   "nan-time": _csv(1, (",3.528,", ",nan,")), "binary": bytes(range(256)).decode("latin-1"),
                   "open-quote": _csv(2, ("\nsc21-t1-1,", '\n"sc21-t1-1,'))}[kind]
        path.write_bytes(content.encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["check-published", "r.csv"], field)


# ---- paths and storages ------------------------------------------------------------------------

@pytest.mark.parametrize("url, field", [
    ("sqlite:///s?x.db", "has a query"), ("sqlite:///d#?/s.db", "has a query"), ("sqlite:///s.db?mode=ro", "has a query"),
    ("sqlite:///{s}.db", "%7B and %7D"),  # Optuna formats the URL as a template
])
def test_a_storage_url_with_a_query_or_braces_is_refused_not_cut_short(tmp_path, capsys, monkeypatch, url, field):
    (tmp_path / "d#?").mkdir()
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, tmp_path, ["search", "--model", "small", "--gpus", "2", "--no-run-dir", "--storage", url],
                  f"storage: '{url}'")
    assert field in err


def test_an_escaped_question_mark_names_the_file_with_it(tmp_path):
    search("small", 2, storage=f"sqlite:///{tmp_path}/s%3Fx.db")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == ["s?x.db"]


def test_a_hard_link_to_a_runs_study_is_refused_as_storage(run, tmp_path, capsys, monkeypatch):
    os.link(run / "study.db", tmp_path / "linked.db")
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["search", "--model", "small", "--gpus", "8", "--no-run-dir", "--storage",
                               "sqlite:///linked.db"], "has 2 names (hard links)")


def test_a_full_disk_while_drawing_the_curve_leaves_no_run_directory(tmp_path, capsys, monkeypatch):
    import autotune.outputs.plots as plots

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(plots, "plot_curve", full)
    monkeypatch.chdir(tmp_path)
    assert main(["curve", "--model", "small", "--gpus", "1,2", "--runs-dir", "c"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left" in err
    assert not (tmp_path / "c").exists()  # the runs directory made for it too


# ---- flags that change nothing, and empty values -----------------------------------------------

@pytest.mark.parametrize("flags, field", [
    (["--cp-comm", "all_gather"], "--cp-comm: changes nothing here"),
    (["--vpp", "2"], "--vpp: changes nothing here"),
    (["--sequence-parallel"], "--sequence-parallel: changes nothing here"),
    (["--async-tp"], "--async-tp: changes nothing here"),
    (["--overlap-tp-comm"], "--overlap-tp-comm: changes nothing here"),
    (["--recompute-early-stop"], "--recompute-early-stop: changes nothing here"),
    (["--runtime", ""], "argument --runtime: must not be empty"),
    (["--cluster", ""], "argument --cluster: must not be empty"),
])
def test_evaluate_refuses_flags_idle_for_the_plan(tmp_path, capsys, monkeypatch, flags, field):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, E + flags, field)


@pytest.mark.parametrize("flags", [["--tp", "2", "--sequence-parallel"], ["--cp", "2", "--cp-comm", "all_gather"],
                                   ["--pp", "2", "--vpp", "2", "--micro-batch", "1"], ["--tp", "2", "--async-tp"],
                                   ["--recompute", "full", "--recompute-early-stop"]])
def test_the_same_flags_count_where_the_plan_uses_them(capsys, flags):
    assert main(E + flags) == 0


@pytest.mark.parametrize("flags, field", [(["--model", "small"], "model"), (["--gpus", "8"], "gpus"),
                                          (["--runtime", "torchtitan"], "runtime"), (["--runs-dir", "r"], "runs_dir")])
def test_a_standalone_space_refuses_the_flags_it_does_not_read(tmp_path, capsys, monkeypatch, flags, field):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["search", "--space", "cxl-lora", *flags], f"{field}: --{flags[0][2:]} changes nothing")


def test_plots_without_a_run_directory_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["search", "--model", "small", "--gpus", "8", "--no-run-dir", "--plots", "sync"],
            "plots: --plots sync draws a run directory's plots")


def test_search_refuses_an_empty_storage(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["search", "--model", "small", "--gpus", "8", "--storage", ""], "--storage: must not be empty")


def test_export_refuses_a_serving_engine_for_a_training_plan(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["export", "RUN", "--format", "megatron", "--runtime", "vllm"], "runtime vllm is a serving engine")


# ---- the library -------------------------------------------------------------------------------

@pytest.mark.parametrize("call, field", [
    (lambda: autotune.load_preset(5), "model"),
    (lambda: autotune.load_runtime(None), "runtime"),
    (lambda: autotune.Runtime(name="x", zero_stages="01"), "runtime.zero_stages"),
    (lambda: autotune.evaluate("small", 8, runtime=5), "runtime"),
])
def test_library_names_of_the_wrong_type_are_refused(call, field):
    with pytest.raises(AutotuneError) as err:
        call()
    assert err.value.field == field


def test_a_new_shared_storage_on_a_full_disk_is_not_left_half_made(tmp_path):
    import subprocess
    import sys

    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=60k", "tmpfs", str(full)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:  # the command as a user runs it (its process, and the database it holds open, end)
        done = subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "small", "--gpus", "8",
                               "--no-run-dir", "--quiet", "--storage", "sqlite:///full/s.db"], cwd=tmp_path,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no space left" in done.stderr, done.stderr
        assert list(full.iterdir()) == []
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_a_plan_of_stage_dicts_is_refused_naming_the_stages():
    with pytest.raises(AutotuneError) as err:
        autotune.Plan(stages=[{"layers": [0, 12]}], gpus=8, micro_batch=1, num_microbatches=1)
    assert err.value.field == "stages"
