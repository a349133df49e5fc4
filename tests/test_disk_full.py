"""A full disk or an unwritable place: one line naming what could not be written (exit 2), no
traceback, nothing half-made left behind (no temporary files, no run directory without
slices; a run's outputs all or none), and finished slices kept for --resume. The study's disk
fills for real: SQLite's max_page_count caps the database file (SQLITE_FULL), or a tiny tmpfs
where this process may mount one."""

from __future__ import annotations

import errno
import importlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli.main import main
from autotune.errors import AutotuneError, Interrupted, write_failure
from autotune.outputs.run_dir import study_db_summary
from autotune.plan.io import atomic_write_text, atomic_write_texts
from autotune.search import store, study_file
from autotune.search.api import resume, search

ROOT = Path(__file__).resolve().parent.parent
SMALL = ("small", 8)


@pytest.fixture(scope="module")
def uninterrupted():
    return search(*SMALL, cache=False)


def _finished(run: Path) -> int:
    return sum(n for _, n in study_db_summary(run / "study.db") or ())


_FILL = """
def fill(conn, extra_pages):
    # The database's pages filled to the brim, then room for extra_pages more: SQLite's disk is full.
    conn.execute("CREATE TABLE filler (x)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0] + 8}")
    for size in (4000, 400, 40, 4):
        try:
            while True:
                conn.execute("INSERT INTO filler VALUES (randomblob(?))", (size,))
        except Exception:
            pass
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0] + extra_pages}")
"""
exec(_FILL)


def _cap_study_file(monkeypatch, extra_pages: int) -> None:
    """A new run's study may grow by ``extra_pages`` database pages, then its disk is full."""
    made = study_file.StudyFile.__init__

    def capped(self, db, name, problem):
        made(self, db, name, problem)
        fill(self._conn, extra_pages)  # noqa: F821  (defined by exec(_FILL), shared with the CLI script)
    monkeypatch.setattr(study_file.StudyFile, "__init__", capped)


class _FullFile:
    """A file whose writes fail as on a full disk."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, _text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def _full_when(monkeypatch, name_part: str) -> None:
    """Writes of files whose temporary name holds ``name_part`` fail with ENOSPC."""
    real = os.fdopen

    def fdopen(fd, *args, **kwargs):
        handle = real(fd, *args, **kwargs)
        return _FullFile(handle) if name_part in os.readlink(f"/proc/self/fd/{fd}") else handle
    monkeypatch.setattr(os, "fdopen", fdopen)


# -- the errors themselves ------------------------------------------------------------------------

def test_write_failures_are_recognised_through_wrappers():
    import optuna
    from sqlalchemy.exc import OperationalError

    full = sqlite3.OperationalError("database or disk is full")
    wrapped = OperationalError("INSERT ...", {}, full)
    try:
        try:
            raise wrapped
        except OperationalError as err:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from err
    except optuna.exceptions.StorageInternalError as err:
        chained = err
    for err in (OSError(errno.ENOSPC, "No space left on device", "/x/plan.json"), OSError(errno.EROFS, "ro"),
                OSError(errno.EDQUOT, "quota"), full, wrapped, chained):
        failure = write_failure(err, "kept")
        assert failure is not None and failure.field == "disk" and str(failure).endswith("; kept"), err
    assert "'/x/plan.json'" in str(write_failure(OSError(errno.ENOSPC, "full", "/x/plan.json")))
    for err in (ValueError("x"), OSError(errno.ENOENT, "gone"), sqlite3.OperationalError("no such table: t")):
        assert write_failure(err) is None


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    target.write_text("old\n")
    _full_when(monkeypatch, ".plan.json.")
    with pytest.raises(AutotuneError, match="plan.json.*no space left") as full:
        atomic_write_text(target, "new\n")
    assert full.value.field == "disk"
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_several_files_are_written_all_or_none(tmp_path, monkeypatch):
    _full_when(monkeypatch, ".c.txt.")
    with pytest.raises(AutotuneError, match="c.txt"):
        atomic_write_texts({tmp_path / "a.txt": "a", tmp_path / "b.txt": "b", tmp_path / "c.txt": "c"})
    assert list(tmp_path.iterdir()) == []


# -- a search whose disk fills --------------------------------------------------------------------

def _full_at_first_slice(monkeypatch) -> None:
    """The first slice's commit fails as SQLite's does on a full disk (SQLITE_FULL)."""
    def record(self, outcome, round_name="base"):
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(study_file.StudyFile, "record", record)


def test_disk_full_before_the_first_slice_leaves_no_run_directory(tmp_path, monkeypatch):
    _full_at_first_slice(monkeypatch)
    with pytest.raises(AutotuneError, match="no space left") as full:
        search(*SMALL, runs_dir=tmp_path / "runs", cache=False, plots="none")
    assert full.value.field == "disk" and "--resume" not in str(full.value)
    assert list(tmp_path.iterdir()) == []  # runs/ too: it was made for this run


def test_disk_full_during_the_search_keeps_the_slices_and_resumes_exactly(tmp_path, monkeypatch, uninterrupted):
    _cap_study_file(monkeypatch, 3)
    with pytest.raises(AutotuneError, match="no space left.*finished slices are kept") as full:
        search(*SMALL, runs_dir=tmp_path / "runs", cache=False, plots="none")
    (run,) = (tmp_path / "runs").iterdir()
    assert full.value.field == "disk" and f"--resume {run}" in str(full.value)
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith("study.db")) == []
    kept = _finished(run)
    assert kept >= 1
    monkeypatch.undo()  # space freed
    again = resume(run, plots="none")
    assert again.stats.num_slices_resumed == kept and again.plan.to_dict() == uninterrupted.plan.to_dict()


def test_disk_full_while_writing_the_outputs_leaves_none_of_them(tmp_path, monkeypatch, uninterrupted):
    _full_when(monkeypatch, ".search.json.")
    with pytest.raises(AutotuneError, match="search.json.*finished slices are kept"):
        search(*SMALL, runs_dir=tmp_path / "runs", cache=False, plots="none")
    (run,) = (tmp_path / "runs").iterdir()
    assert sorted(p.name for p in run.iterdir()) == ["study.db"]  # no plan.json without its search.json
    monkeypatch.undo()
    assert resume(run, plots="none").plan.to_dict() == uninterrupted.plan.to_dict()
    assert {"plan.json", "search.json", "report.md"} <= {p.name for p in run.iterdir()}


def test_disk_full_while_resuming_through_optuna_keeps_every_slice(tmp_path, monkeypatch):
    def stop_after_two(outcome, done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt
    with pytest.raises(Interrupted):
        search(*SMALL, runs_dir=tmp_path / "runs", cache=False, plots="none", progress=stop_after_two)
    (run,) = (tmp_path / "runs").iterdir()
    fast = store._fast_sqlite

    def capped(storage):
        fast(storage)
        from sqlalchemy import event

        @event.listens_for(storage.engine, "connect")
        def _cap(dbapi_connection, _record):
            pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")
    monkeypatch.setattr(store, "_fast_sqlite", capped)
    with pytest.raises(AutotuneError, match="no space left.*--resume") as full:
        resume(run, plots="none")
    assert full.value.field == "disk" and _finished(run) >= 2
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith("study.db")) == []


def test_a_failed_search_in_an_existing_directory_removes_only_its_study(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    _full_at_first_slice(monkeypatch)
    with pytest.raises(AutotuneError, match="no space left"):
        search(*SMALL, run_dir=mine, cache=False, plots="none")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


# -- the command line -----------------------------------------------------------------------------

_CAPPED = _FILL + """
import sys
from autotune.search import study_file
made = study_file.StudyFile.__init__
extra = int(sys.argv.pop(1))
def capped(self, db, name, problem):
    made(self, db, name, problem)
    fill(self._conn, extra)
def full(self, outcome, round_name="base"):
    raise sqlite3.OperationalError("database or disk is full")
study_file.StudyFile.__init__ = capped
if extra == 0:  # (the first slice does not fit)
    import sqlite3
    study_file.StudyFile.record = full
from autotune.cli import main, signals
sys.exit(signals.finish(main.main(sys.argv[1:])))
"""


@pytest.mark.parametrize("extra_pages, kept", [(0, False), (3, True)])
def test_cli_disk_full_is_one_line_exit_2(tmp_path, extra_pages, kept):
    argv = ["search", "--model", "small", "--gpus", "8", "--quiet", "--plots", "none", "--runs-dir", "runs"]
    done = subprocess.run([sys.executable, "-c", _CAPPED, str(extra_pages), *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("autotune search: error: disk: cannot write") and not done.stdout
    assert ("--resume runs/" in done.stderr) == kept and (tmp_path / "runs").exists() == kept


def _forbid(monkeypatch, target: str, attribute: str) -> None:
    def work(*args, **kwargs):
        raise AssertionError(f"{target}.{attribute} ran although its output cannot be written")
    monkeypatch.setattr(importlib.import_module(target), attribute, work)


PLAN = str(ROOT / "docs" / "samples" / "plan-small-2.json")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("argv, target, attribute", [
    (["validate", PLAN, "--out", "/proc/nope/x"], "autotune.validate.runner", "validate_cases"),
    (["validate", PLAN, "--out", "/proc/self/v.json"], "autotune.validate.runner", "validate_cases"),
    (["profile", "--quick", "--out", "/proc/nope/p.json"], "autotune.cli.profile_cmd", "_measure"),
    (["export", PLAN, "--format", "megatron", "--out", "/proc/nope/x.sh"], "autotune.outputs.export", "export"),
    (["search", "--model", "small", "--gpus", "2", "--runs-dir", "/proc/nope/runs"], "autotune.search.engine", "run_search"),
], ids=["validate", "validate-proc-self", "profile", "export", "search"])
def test_out_where_nothing_can_be_made_fails_before_the_work(monkeypatch, capsys, argv, target, attribute):
    """Permission bits say root may write in /proc; creating a file there fails all the same."""
    _forbid(monkeypatch, target, attribute)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/proc/" in err and "Traceback" not in err


# -- a real full file system ----------------------------------------------------------------------

@pytest.fixture
def tiny_fs(tmp_path):
    """A 240 KiB tmpfs (room for the empty study and a slice or so), where this process may mount one."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=240k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_a_real_full_disk_keeps_the_slices_and_resumes_once_there_is_room(tiny_fs, uninterrupted):
    with pytest.raises(AutotuneError, match="no space left") as full:
        search(*SMALL, runs_dir=tiny_fs / "runs", cache=False, plots="none")
    runs = list((tiny_fs / "runs").iterdir()) if (tiny_fs / "runs").exists() else []
    assert all(not p.name.startswith(".") for r in runs for p in r.iterdir())  # no temporary files
    if not runs:  # the study did not fit at all: nothing is left
        assert "--resume" not in str(full.value) and list(tiny_fs.iterdir()) == []
        return
    (run,) = runs
    assert _finished(run) >= 1 and f"--resume {run}" in str(full.value)
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_fs)], check=True)
    assert resume(run, plots="none").plan.to_dict() == uninterrupted.plan.to_dict()
