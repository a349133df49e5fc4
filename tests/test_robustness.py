"""Edges users hit first: wrong library arguments, outputs that cannot be written, file modes,
GPU counts that are not powers of two, concurrent searches on one new database, and the CLI
over random argument strings."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotune
from autotune.cli.main import main
from autotune.errors import AutotuneError

ROOT = Path(__file__).resolve().parent.parent
TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 1000, "n_positions": 512}


# -- the library raises its own error, naming the argument --------------------------------------

LIBRARY_CASES = [
    ("search", dict(model=None, gpus=8), "model"),
    ("search", dict(model="large", gpus=8, seed="x"), "seed"),
    ("search", dict(model="large", gpus=8, workload="train"), "workload"),
    ("search", dict(model="large", gpus=8, seed=2**40), "seed"),
    ("search", dict(model="large", gpus=8, no_such_option=1), "no_such_option"),
    ("search", dict(model="large", gpus=8, global_batch=0), "global_batch"),
    ("search", dict(model="large", gpus="8"), "gpus"),
    ("search", dict(model="large", gpus=True), "gpus"),
    ("search", dict(model="large"), "gpus"),
    ("search", dict(model="large", gpus=8, cluster=None), "cluster"),
    ("search", dict(model="large", gpus=8, plots="png"), "plots"),
    ("search", dict(model="large", gpus=8, method="random"), "method"),
    ("search", dict(model="large", gpus=8, progress=5), "progress"),
    ("search", dict(model="large", gpus=8, global_batch=10**9), "global_batch"),
    ("evaluate", dict(model=None, gpus=8), "model"),
    ("evaluate", dict(model="large", gpus=8, global_batch=0), "global_batch"),
    ("evaluate", dict(model="large", gpus=8, tp="2"), "tp"),
    ("evaluate", dict(model="large", gpus=8, bogus=True), "bogus"),
    ("evaluate", dict(model="large", gpus=8, seq_len=0), "seq_len"),
    ("scaling_curve", dict(model="large", gpus="1,2"), "gpus"),
    ("scaling_curve", dict(model="large", gpus=[1, 2], seed="x"), "seed"),
    ("scaling_curve", dict(model="large", gpus=[1, 2], run_dir="x"), "run_dir"),
    ("resume", dict(run_dir=None), "run_dir"),
]


@pytest.mark.parametrize("name, kwargs, field", LIBRARY_CASES, ids=[f"{n}-{f}" for n, _, f in LIBRARY_CASES])
def test_library_wrong_arguments_raise_autotune_error_naming_them(name, kwargs, field):
    with pytest.raises(AutotuneError) as info:
        getattr(autotune, name)(**kwargs)
    assert info.value.field == field


def test_global_batch_zero_is_not_the_default():
    from autotune.spec.resolve import training_workload

    with pytest.raises(AutotuneError, match="global_batch"):
        training_workload(autotune.load_preset("large"), global_batch=0)


# -- one signal path ---------------------------------------------------------------------------

def test_an_error_raised_while_unwinding_an_interrupt_still_exits_130(monkeypatch, capsys):
    """Optuna can turn a KeyboardInterrupt into an UnboundLocalError inside its trial
    bookkeeping: the signal, not the error, decides the exit."""
    import logging

    from autotune.cli import evaluate_cmd, signals

    def interrupted_in_bookkeeping(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            raise UnboundLocalError("cannot access local variable 'frozen_trial'")

    monkeypatch.setattr(evaluate_cmd, "run", interrupted_in_bookkeeping)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = main(["evaluate", "--model", "large", "--gpus", "8"])
    finally:
        signals._received.clear()
        logging.disable(logging.NOTSET)
        for signum, handler in old.items():
            signal.signal(signum, handler)
    err = capsys.readouterr().err
    assert code == 130 and err == "autotune evaluate: interrupted\n"


# -- outputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    from autotune.plan.io import atomic_write_text

    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a" / "plan.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "plan.json").stat().st_mode) == mode


def test_run_files_are_readable_by_the_group_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        result = autotune.search("small", 2, runs_dir=tmp_path / "runs", plots="none")
    finally:
        os.umask(old)
    for name in ("plan.json", "search.json", "report.md"):
        assert stat.S_IMODE((Path(result.run_dir) / name).stat().st_mode) == 0o644


def _forbid(monkeypatch, target: str, attribute: str) -> None:
    import importlib

    def work(*args, **kwargs):
        raise AssertionError(f"{target}.{attribute} ran although its output cannot be written")

    monkeypatch.setattr(importlib.import_module(target), attribute, work)


OUT_CASES = [
    (["export", "RUN", "--format", "megatron", "--out", "afile/x.sh"], "autotune.outputs.export", "export"),
    (["scenario", "seed-experiment", "--out", "afile/x.md"], "autotune.scenarios.seed_experiment", "seed_comparison"),
    (["validate", "RUN", "--out", "afile/v.json"], "autotune.validate.runner", "validate_cases"),
    (["profile", "--out", "afile/p.json", "--quick"], "autotune.cli.profile_cmd", "_measure"),
    (["profile", "--refit", "RUN/plan.json", "--out", "afile/p.json"], "autotune.calibrate.profile_io", "build_profile"),
    (["search", "--model", "small", "--gpus", "2", "--runs-dir", "afile/runs"], "autotune.search.engine", "run_search"),
    (["curve", "--model", "small", "--gpus", "1,2", "--runs-dir", "afile/runs"], "autotune.search.curve", "scaling_curve"),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("out")
    result = autotune.search("small", 2, runs_dir=root / "runs", plots="none")
    Path(result.run_dir).rename(root / "RUN")
    (root / "afile").write_text("a file, not a directory\n")
    return root


@pytest.mark.parametrize("argv, target, attribute", OUT_CASES, ids=[a[0] for a, _, _ in OUT_CASES])
def test_unwritable_out_fails_before_the_work(run_dir, monkeypatch, capsys, argv, target, attribute):
    monkeypatch.chdir(run_dir)
    _forbid(monkeypatch, target, attribute)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "afile" in err and "Traceback" not in err


# -- GPU counts that are not powers of two ---------------------------------------------------------

@pytest.mark.parametrize("gpus", [3, 5, 6])
def test_search_finds_plans_on_counts_that_do_not_tile_a_node(tmp_path, gpus):
    """A 2-layer model on 3, 5 or 6 of a node's 8 GPUs: the batch (256) leaves dp 1 or 2, so the
    plan needs unequal stages (2 + 1 GPUs, ...). It fits easily; the search must find it."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    # the torch runtime's space has stages on submeshes of different sizes (Megatron's does not)
    result = autotune.search(str(config), gpus, runtime="torch", space="default", plots="none", cache=False)
    assert result.estimate.fits and result.plan.gpus == gpus
    assert sum(s.num_gpus for s in result.plan.stages) == gpus


@pytest.mark.parametrize("model, gpus, batch", [("xl", 5, 10), ("large", 6, 12), ("small", 3, 3), ("medium", 7, 14)])
def test_search_is_no_worse_than_the_data_parallel_plan_evaluate_finds(model, gpus, batch):
    est = autotune.evaluate(model, gpus, global_batch=batch, micro_batch=batch // gpus)  # dp = gpus
    assert est.fits
    result = autotune.search(model, gpus, global_batch=batch, plots="none", cache=False)
    assert result.estimate.step_time_s <= est.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("model, gpus, batch", [("2.7b", 5, 20), ("gpt3-350m", 7, 42), ("medium", 5, 8)])
def test_interleaved_candidates_use_every_gpu(model, gpus, batch):
    """Equal interleaved stages are offered only where they cover the GPUs (4 of 5 raised an error)."""
    result = autotune.search(model, gpus, global_batch=batch, plots="none", cache=False)
    assert result.plan.gpus == gpus == sum(s.num_gpus for s in result.plan.stages) and result.estimate.fits


def test_no_plan_is_exit_1_with_the_reason(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    assert main(["search", "--model", str(config), "--gpus", "7", "--no-run-dir", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "7 GPUs" in err and "at least 1 GPUs" not in err and "2 layers" in err
    assert main(["search", "--model", "llama3-70b", "--gpus", "1", "--no-run-dir", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "needs at least" in err and "GPUs" in err


# -- concurrent searches on one new SQLite storage ----------------------------------------------

RACER = """
import sys, time
from autotune.search.store import open_study
start = float(sys.argv[2])
while time.time() < start:
    pass
study = open_study("sqlite:///" + sys.argv[1], "shared", {"problem": 1})
print(study.study_name)
"""


def test_processes_opening_one_new_sqlite_storage_at_once_all_succeed(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for round_ in range(2):
        db = tmp_path / f"race-{round_}.db"
        start = time.time() + 4.0  # all processes imported and spinning by then
        procs = [subprocess.Popen([sys.executable, "-c", RACER, str(db), str(start)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and out.strip() == "shared", err


# -- the CLI over random argument strings -----------------------------------------------------------

FLAGS = ["--model", "--gpus", "--global-batch", "--seq-len", "--cluster", "--tp", "--pp", "--dp", "--cp", "--zero",
         "--micro-batch", "--dtype", "--recompute", "--workload", "--batch", "--out", "--format", "--json", "--set",
         "--space", "--resume", "--threshold", "--vpp", "--schedule", "--profile", "--seed", "--no-run-dir"]
VALUES = st.one_of(st.sampled_from(["large", "small", "tiny.json", "RUN", "nosuch", "dgx-h100", "cpu", "bf16", "fp64",
                                    "megatron", "full", "decode", "x=1", "afile/out", "-1", "0", "1", "8", "16",
                                    "1000000007", "1e23", "nan", "", "--", "-"]),
                   st.integers(min_value=-10**12, max_value=10**12).map(str),
                   st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12))
# Commands whose every path is quick without a run directory (no search, no torch, no measuring).
QUICK = ["evaluate", "show", "explain", "export"]
ARGV = st.tuples(st.sampled_from(QUICK), st.lists(st.one_of(st.sampled_from(FLAGS), VALUES), max_size=8))


@pytest.fixture(scope="module")
def fuzz_dir(run_dir) -> Path:
    (run_dir / "tiny.json").write_text(json.dumps(TINY))
    return run_dir


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=ARGV)
def test_cli_over_random_arguments_never_crashes_or_writes(fuzz_dir, argv):
    command, rest = argv
    before = sorted(str(p) for p in fuzz_dir.rglob("*"))
    proc_cwd = os.getcwd()
    os.chdir(fuzz_dir)
    try:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([command, *rest])
    finally:
        os.chdir(proc_cwd)
    text = err.getvalue()
    assert code in (0, 1, 2), (argv, code, text)
    assert "Traceback" not in text, (argv, text)
    if code == 2:
        assert text.count("\n") == 1, (argv, text)
    if "--out" not in rest:
        assert sorted(str(p) for p in fuzz_dir.rglob("*")) == before, argv


@settings(max_examples=150, deadline=None)
@given(argv=st.lists(st.one_of(st.sampled_from(["search", "curve", "profile", "graph", "benchmark", "validate",
                                                "scenario", "worker", "check-published", *QUICK]),
                               st.sampled_from(FLAGS), VALUES), max_size=8))
def test_parser_over_random_arguments_accepts_or_refuses_in_one_line(argv):
    """Parsing alone (every command, no work): a namespace, or exit 2 with one line."""
    import contextlib
    import io

    from autotune.cli.main import build_parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exit_:
            assert exit_.code in (0, 2), (argv, exit_.code)
            if exit_.code == 2:
                assert err.getvalue().count("\n") == 1, (argv, err.getvalue())
