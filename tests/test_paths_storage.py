"""Run directories, caches and storages under paths that are not plain URL text (``#``, ``?``,
``%``, spaces, braces, quotes): an interrupted search keeps its slices and prints a resume
command that works, and resuming gives exactly the uninterrupted plan. Real SQLite files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import Interrupted
from autotune.outputs.run_dir import read_only_uri, study_db_summary, study_url
from autotune.search.api import resume, search
from autotune.plan.sqlite_url import sqlite_file, sqlite_uri, sqlite_url

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["my#runs", "p?q", "p%41q", "100%", "two words", "br{ace}s", "it's", "a#b?c%d e"]
SMALL = ("small", 8)


@pytest.fixture(scope="module")
def uninterrupted():
    return search(*SMALL, cache=False)


def _stop_after(n: int):
    def progress(outcome, done: int, total: int) -> None:
        if done == n:
            raise KeyboardInterrupt
    return progress


@pytest.mark.parametrize("name", NAMES)
def test_url_helpers_round_trip_the_exact_path(tmp_path, name):
    db = tmp_path / name / "study.db"
    db.parent.mkdir()
    assert sqlite_file(sqlite_url(db)) == db.resolve()
    with sqlite3.connect(sqlite_uri(db), uri=True) as conn:  # creates exactly db, nothing beside it
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name] and db.is_file()
    with sqlite3.connect(read_only_uri(db), uri=True) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    conn.close()


@pytest.mark.parametrize("name", NAMES)
def test_interrupted_search_keeps_its_slices_and_resumes_exactly(tmp_path, uninterrupted, name):
    with pytest.raises(Interrupted) as stopped:
        search(*SMALL, runs_dir=tmp_path / name, cache=False, plots="none", progress=_stop_after(3))
    (run,) = (tmp_path / name).iterdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no stray file beside the runs
    assert [n for _, n in study_db_summary(run / "study.db")] == [3]
    assert "--resume " in stopped.value.note and str(run) in stopped.value.note
    again = resume(run, plots="none")
    assert again.stats.num_slices_resumed == 3
    assert again.plan.to_dict() == uninterrupted.plan.to_dict()
    assert again.estimate.step_time_s == uninterrupted.estimate.step_time_s
    assert (run / "plan.json").is_file() and sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_resumed_search_interrupted_again_keeps_every_slice(tmp_path, uninterrupted):
    """The second leg goes through Optuna's storage (study_url), not the plain-sqlite writer."""
    with pytest.raises(Interrupted):
        search(*SMALL, runs_dir=tmp_path / "x#y%z?", cache=False, plots="none", progress=_stop_after(2))
    (run,) = (tmp_path / "x#y%z?").iterdir()
    with pytest.raises(Interrupted):
        resume(run, plots="none", progress=_stop_after(2))
    assert study_db_summary(run / "study.db")[0][1] == 4
    assert resume(run, plots="none").plan.to_dict() == uninterrupted.plan.to_dict()


def test_the_study_template_cache_may_live_under_any_path(tmp_path, monkeypatch):
    from autotune.search.study_file import template_path

    cache = tmp_path / "c#a%2c?e{}"
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(cache))
    path = template_path()
    assert path.parent == cache and path.is_file() and study_db_summary(path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.name]


def test_a_study_url_opens_with_optuna_at_the_exact_path(tmp_path):
    import optuna

    run = tmp_path / "r#1?x=%20"
    run.mkdir()
    storage = optuna.storages.RDBStorage(study_url(run))
    optuna.create_study(study_name="s", storage=storage).set_user_attr("k", 1)
    storage.engine.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == [run.name]
    assert study_db_summary(run / "study.db") == [("s", 0)]


# The command line: a real SIGINT after the third stored slice, in either study writer.
_INTERRUPTING = """
import os, signal, sys
from autotune.search import store, study_file
stored = []
def stop(record):
    def wrapped(*args, **kwargs):
        record(*args, **kwargs)
        stored.append(1)
        if len(stored) == 3:
            os.kill(os.getpid(), signal.SIGINT)
    return wrapped
study_file.StudyFile.record = stop(study_file.StudyFile.record)
store.record_slice = stop(store.record_slice)
if os.environ.get("NO_TEMPLATE"):
    study_file.template_path = lambda: (_ for _ in ()).throw(OSError("no template"))
from autotune.cli import main, signals
sys.exit(signals.finish(main.main(sys.argv[1:])))
"""


def _cli(argv: list[str], cwd: Path, script: str | None = None, **env: str) -> subprocess.CompletedProcess:
    head = [sys.executable, "-c", script] if script else [sys.executable, "-m", "autotune"]
    return subprocess.run([*head, *argv], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name, writer", [("my#runs", "sqlite3"), ("a#b?c%d e", "optuna")])
def test_cli_interrupt_prints_a_resume_command_that_works(tmp_path, name, writer):
    fresh = _cli(["search", "--model", "small", "--gpus", "8", "--no-run-dir", "--json"], tmp_path)
    argv = ["search", "--model", "small", "--gpus", "8", "--quiet", "--plots", "none", "--runs-dir", name]
    stopped = _cli(argv, tmp_path, _INTERRUPTING, **({"NO_TEMPLATE": "1"} if writer == "optuna" else {}))
    assert stopped.returncode == 130 and len(stopped.stderr.splitlines()) == 1, stopped.stderr
    (run,) = (tmp_path / name).iterdir()
    assert study_db_summary(run / "study.db")[0][1] == 3
    command = stopped.stderr.split("continue with ")[1].strip()
    import shlex

    words = shlex.split(command)  # as a shell would split the printed command
    assert words[:3] == ["autotune", "search", "--resume"] and (tmp_path / words[3]).resolve() == run.resolve()
    moved = tmp_path / "a#b" / "R"  # a run moved elsewhere resumes too
    moved.parent.mkdir()
    run.rename(moved)
    done = _cli(["search", "--resume", "a#b/R", "--json", "--quiet", "--plots", "none"], tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stats"]["num_slices_resumed"] == 3 and result["plan"] == json.loads(fresh.stdout)["plan"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a#b", name])  # no stray "a"
