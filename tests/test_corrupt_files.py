"""Corrupt plan.json and search.json given to show, explain, export, validate and evaluate
--plan: one line naming the field (and the file), exit 2, within seconds, no traceback; and
show --json never exits 0 on nonsense. One reader per file kind (autotune.plan.json_file,
autotune.plan.checks)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from autotune.cli.main import main
from autotune.search.api import search


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return Path(search("small", 8, runs_dir=tmp_path_factory.mktemp("runs"), plots="none").run_dir)


def _plan_text(good: Path) -> str:
    return (good / "plan.json").read_text()


def _edited(good: Path, edit) -> bytes:
    data = json.loads(_plan_text(good))
    edit(data)
    return json.dumps(data).encode()


# name -> (plan.json's bytes from the good run, what the one line must name)
PLAN_CASES = {
    "binary": (lambda g: bytes(range(256)) * 16, "not UTF-8"),
    "layers-string": (lambda g: _edited(g, lambda d: d["plan"]["stages"][0].update(layers=["a", 12])),
                      "plan.stages[0].layers[0]"),
    "layers-infinity": (lambda g: _plan_text(g).replace('"layers": [\n', '"layers": [Infinity, ', 1).encode(),
                        "plan.stages[0].layers[0]: must be a finite number"),
    "layers-1e999": (lambda g: _edited(g, lambda d: d["plan"]["stages"][0].update(tp="TP")).replace(b'"TP"', b"1e999"),
                     "plan.stages[0].tp: must be a finite number"),
    "model-list": (lambda g: _edited(g, lambda d: d.update(model=[1])), "model: must be an object"),
    "workload-string": (lambda g: _edited(g, lambda d: d.update(workload="train")), "workload: must be an object"),
    "workload-kind-list": (lambda g: _edited(g, lambda d: d["workload"].update(kind=[1])), "workload.kind"),
    "model-layers-string": (lambda g: _edited(g, lambda d: d["model"].update(num_layers="12")), "model.num_layers"),
    "gpus-bool": (lambda g: _edited(g, lambda d: d["plan"].update(gpus=True)), "plan.gpus"),
    "cluster-number": (lambda g: _edited(g, lambda d: d.update(cluster=7)), "cluster"),
    "estimate-nan": (lambda g: _plan_text(g).replace('"step_time_s": ', '"step_time_s": NaN, "was": ', 1).encode(),
                     "estimate.step_time_s: must be a finite number"),
    "nested-100000": (lambda g: b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "nested-500": (lambda g: b'{"plan": ' + b"[" * 500 + b"]" * 500 + b"}", "nested too deeply"),
    "huge-integer": (lambda g: _edited(g, lambda d: d["plan"].update(micro_batch="MB")).replace(b'"MB"', b"9" * 5000),
                     "out of range"),
    "empty": (lambda g: b"", "not valid JSON"),
    "top-level-list": (lambda g: b"[1, 2]", "plan: must be a JSON object"),
}
COMMANDS = {
    "show": lambda run: ["show", str(run)],
    "show-json": lambda run: ["show", str(run), "--json"],
    "explain": lambda run: ["explain", str(run)],
    "export": lambda run: ["export", str(run), "--format", "megatron"],
    "validate": lambda run: ["validate", str(run), "--out", str(run / "v.json")],
    "evaluate": lambda run: ["evaluate", "--model", "small", "--gpus", "8", "--plan", str(run / "plan.json")],
}


def _copy(good: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good, run)
    return run


def _one_line_exit_2(capsys, argv: list[str], names: str) -> str:
    start = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and names in err and "Traceback" not in err, (code, err)
    assert not out and elapsed < 10, (out, elapsed)
    return err


@pytest.mark.parametrize("case", PLAN_CASES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_corrupt_plan_file_is_one_line_naming_the_field(good, tmp_path, capsys, case, command):
    run = _copy(good, tmp_path)
    content, names = PLAN_CASES[case]
    (run / "plan.json").write_bytes(content(good))
    _one_line_exit_2(capsys, COMMANDS[command](run), names)
    assert not (run / "v.json").exists()


@pytest.mark.parametrize("command", ["explain", "export", "validate", "evaluate"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_a_directory_given_as_the_plan_file(tmp_path, capsys, command, kind):
    plan = tmp_path / "given" / "plan.json"
    plan.parent.mkdir()
    os.mkfifo(plan) if kind == "fifo" else plan.mkdir()
    plan = plan if kind == "fifo" else plan.parent  # a directory given is read as a run: its plan.json, here a directory
    argv = {"explain": ["explain", str(plan)], "export": ["export", str(plan), "--format", "megatron"],
            "validate": ["validate", str(plan), "--out", str(tmp_path / "v.json")],
            "evaluate": ["evaluate", "--model", "small", "--gpus", "8", "--plan", str(plan)]}[command]
    _one_line_exit_2(capsys, argv, "a FIFO" if kind == "fifo" else "a directory")


SEARCH_CASES = {
    "binary": (lambda text: b"\xff\xfe" + os.urandom(64), "not UTF-8"),
    "list": (lambda text: b"[1, 2]", "must be a JSON object"),
    "nan": (lambda text: text.replace('"step_time_s": ', '"step_time_s": NaN, "was": ', 1).encode(),
            "estimate.step_time_s: must be a finite number"),
    "nested": (lambda text: b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    "plan-string": (lambda text: _json_edit(text, lambda d: d.update(plan="dp8")), "plan: must be an object"),
    "stats-string": (lambda text: _json_edit(text, lambda d: d["stats"].update(num_slices="19")), "stats.num_slices"),
    "estimate-fits": (lambda text: _json_edit(text, lambda d: d["estimate"].update(fits="yes")), "estimate.fits"),
    "history": (lambda text: _json_edit(text, lambda d: d.update(slice_history=[["1", 0.1]])), "slice_history[0]"),
    "points": (lambda text: _json_edit(text, lambda d: d.update(slice_points=[{"plan": 3}])), "slice_points[0]"),
    "baseline": (lambda text: _json_edit(text, lambda d: d["baselines"][0].update(name=None)), "baselines[0]"),
    "derived-pp": (lambda text: _json_edit(text, lambda d: d["plan"].update(pp=[1])), "plan.pp"),
}


def _json_edit(text: str, edit) -> bytes:
    data = json.loads(text)
    edit(data)
    return json.dumps(data).encode()


@pytest.mark.parametrize("case", SEARCH_CASES)
@pytest.mark.parametrize("as_json", [False, True])
def test_show_refuses_a_corrupt_search_record(good, tmp_path, capsys, case, as_json):
    run = _copy(good, tmp_path)
    content, names = SEARCH_CASES[case]
    (run / "search.json").write_bytes(content((good / "search.json").read_text()))
    _one_line_exit_2(capsys, ["show", str(run), *(["--json"] if as_json else [])], names)


def test_show_refuses_a_binary_report_and_a_fifo_record(good, tmp_path, capsys):
    run = _copy(good, tmp_path)
    (run / "report.md").write_bytes(b"\x80\x81" * 100)
    _one_line_exit_2(capsys, ["show", str(run)], "not UTF-8")
    (run / "search.json").unlink()
    os.mkfifo(run / "search.json")
    _one_line_exit_2(capsys, ["show", str(run), "--json"], "a FIFO")


def test_a_good_run_still_reads(good, capsys):
    for argv in (["show", str(good), "--json"], ["explain", str(good), "--json"],
                 ["export", str(good), "--format", "megatron"]):
        assert main(argv) == 0
    capsys.readouterr()
