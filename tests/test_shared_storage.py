"""A shared storage recognises its own problem (canonical JSON, versioned), and a run's own
study.db is never written by another search. Real SQLite files, no mocks."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import AutotuneError
from autotune.outputs.run_dir import study_db_summary
from autotune.search.api import search
from autotune.search.problem_id import PROBLEM_SCHEMA, PROBLEM_SCHEMA_ATTR, problem_attrs
from autotune.search.store import open_study

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = {"model": {"name": "m", "layers": (1, 2)}, "cluster": {"data": {"mesh": ((8, 1), (2, 4))}}, "gpus": 8,
           "profile": None, "scale": 1.5e-3}


def _url(db: Path) -> str:
    return f"sqlite:///{db}"


def test_a_problem_with_tuples_matches_what_the_storage_gave_back(tmp_path):
    url = _url(tmp_path / "shared.db")
    open_study(url, "s", PROBLEM)
    again = open_study(url, "s", dict(reversed(PROBLEM.items())))  # tuples again, keys in another order
    assert again.user_attrs == problem_attrs(PROBLEM)  # stored as JSON gives it back, with its schema
    with pytest.raises(AutotuneError, match="another problem"):
        open_study(url, "s", {**PROBLEM, "gpus": 16})


def test_a_study_recorded_before_the_schema_still_matches(tmp_path):
    """Studies made by earlier versions carry the problem only (schema 1): they still open."""
    db = tmp_path / "old.db"
    open_study(_url(db), "s", PROBLEM)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM study_user_attributes WHERE key = ?", (PROBLEM_SCHEMA_ATTR,))
    conn.close()
    assert open_study(_url(db), "s", PROBLEM).user_attrs["problem"]["gpus"] == 8


def test_a_study_of_another_problem_schema_is_named_as_such(tmp_path):
    db = tmp_path / "future.db"
    open_study(_url(db), "s", PROBLEM)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE study_user_attributes SET value_json = ? WHERE key = ?",
                     (json.dumps(PROBLEM_SCHEMA + 1), PROBLEM_SCHEMA_ATTR))
    conn.close()
    for problem in (PROBLEM, None):  # searching and loading (a worker) alike
        with pytest.raises(AutotuneError, match="another autotune version"):
            open_study(_url(db), "s", problem)


def test_the_same_search_twice_on_one_storage_reuses_its_study(tmp_path):
    url = _url(tmp_path / "shared.db")
    first = search("small", 8, storage=url, cache=False)
    stored = study_db_summary(tmp_path / "shared.db")
    second = search("small", 8, storage=url, cache=False)
    assert second.plan.to_dict() == first.plan.to_dict()
    assert len(stored) == 1 and study_db_summary(tmp_path / "shared.db") == stored  # nothing solved again


def _cli(*argv: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autotune", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_two_searches_at_once_on_one_sqlite_storage_both_succeed(tmp_path):
    argv = ("search", "--model", "small", "--gpus", "8", "--storage", "sqlite:///shared.db", "--json", "--quiet")
    procs = [_cli(*argv, cwd=tmp_path) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    plans = [json.loads(out)["plan"] for out, _ in outs]
    assert plans[0] == plans[1]
    assert len(study_db_summary(tmp_path / "shared.db")) == 1


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return Path(search("small", 4, runs_dir=tmp_path_factory.mktemp("runs"), plots="none").run_dir)


@pytest.mark.parametrize("how", ["direct", "relative", "symlink"])
def test_storage_at_a_runs_own_study_is_refused_and_the_file_left_alone(tmp_path, run, how):
    db = run / "study.db"
    before = db.read_bytes()
    if how == "symlink":
        (tmp_path / "shared.db").symlink_to(db)
        url = "sqlite:///shared.db"
    else:
        url = f"sqlite:///{os.path.relpath(db, tmp_path) if how == 'relative' else db}"
    proc = _cli("search", "--model", "small", "--gpus", "8", "--storage", url, "--quiet", cwd=tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and err.count("\n") == 1 and "storage" in err and "--resume" in err, err
    assert "Traceback" not in err and db.read_bytes() == before
    assert sorted(p.name for p in run.iterdir()) == ["plan.json", "report.md", "search.json", "study.db"]


def test_a_run_directory_given_again_for_another_problem_is_refused(run):
    before = (run / "study.db").read_bytes()
    with pytest.raises(AutotuneError, match="another search") as refused:
        search("small", 8, run_dir=run, plots="none")
    assert refused.value.field == "run_dir" and (run / "study.db").read_bytes() == before
    assert len(study_db_summary(run / "study.db")) == 1
