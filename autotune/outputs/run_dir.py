"""Run directories: runs/<timestamp>-<model>-<gpus>/ with plan.json, study.db, search.json, report.md."""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, require
from autotune.plan.io import atomic_write_texts, check_output_path, read_plan_file
from autotune.plan.sqlite_url import shell_word, sqlite_file, sqlite_uri, sqlite_url

__all__ = ["create_run_dir", "check_writable", "study_url", "write_run", "load_search_record", "STUDY_FILE",
           "NewRunDir", "make_run_dir", "study_db_summary", "read_only_uri", "resume_note",
           "check_study_target"]

STUDY_FILE = "study.db"


def check_writable(root: Path) -> None:
    """Fail early, before any work, when runs cannot be written under ``root`` (nothing is created)."""
    check_output_path(root, "runs_dir", directory=True)


def _missing_parents(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, outermost first."""
    missing = []
    for p in (path, *path.parents):
        if p.exists():
            break
        missing.append(p)
    return missing[::-1]


def create_run_dir(root: Path, model_name: str, gpus: int) -> Path:
    check_writable(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AutotuneError("runs_dir", f"cannot create {str(root)!r}: {err.strerror}") from None
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_name).strip("-") or "model"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(100):
        path = root / f"{stamp}-{slug}-{gpus}" if i == 0 else root / f"{stamp}-{slug}-{gpus}-{i}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as err:  # a full disk, a read-only file system
            raise AutotuneError("runs_dir", f"cannot create {str(path)!r}: {err.strerror}") from None
    raise AutotuneError("run_dir", f"cannot create a new run directory under {str(root)!r}")


def resume_note(run_dir: Path) -> str:
    """What an interrupted search says about the slices it kept, with a command that resumes it."""
    return f"finished slices are kept in {run_dir}; continue with autotune search --resume {shell_word(run_dir)}"


@dataclass
class NewRunDir:
    """A run directory a search made (``path``; None: none), and the folders made for it."""

    path: Path | None = None
    made: list[Path] = field(default_factory=list)

    def clean_up(self, err: BaseException) -> str:
        """After a failed or interrupted search: remove what was made unless it holds finished
        slices (never after a negative answer). Returns a note when slices are kept."""
        if self.path is None:  # refused or interrupted before its folder: only the parents made for it
            _remove_empty(self.made)
            return ""
        from autotune.errors import NoPlanError

        summary = study_db_summary(self.path / STUDY_FILE)
        finished = summary is None or any(n > 0 for _, n in summary)  # unreadable: keep, never lose work
        if finished and self.path.exists() and not isinstance(err, NoPlanError):
            return resume_note(self.path)
        if self.path in self.made:  # made by this search: all of it goes
            shutil.rmtree(self.path, ignore_errors=True)
        else:  # a directory that was there before: only the study this search wrote in it
            for suffix in ("", "-wal", "-shm"):
                (self.path / f"{STUDY_FILE}{suffix}").unlink(missing_ok=True)
        _remove_empty(self.made)
        return ""


def _remove_empty(folders: list[Path]) -> None:
    """The folders a search made for its run directory, innermost first, where nothing is in them."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:  # not empty (another run), or gone
            continue


def make_run_dir(run_dir: str | Path | None, runs_dir: str | Path | None, model_name: str, gpus: int,
                 into: NewRunDir | None = None) -> NewRunDir:
    """The run directory of a search: ``run_dir`` as given, or a new one under ``runs_dir``;
    call only once the inputs are known to be good. ``into`` (the caller's, already inside its
    clean-up) records each folder as it is made, so an interrupt at any moment leaves nothing behind."""
    made = NewRunDir() if into is None else into
    if runs_dir is not None:
        check_writable(Path(runs_dir))  # before looking for its parents: a name too long is refused here
        made.made = _missing_parents(Path(runs_dir))
        with _signals_held():  # the folder and its record together: a signal lands after both
            made.path = create_run_dir(Path(runs_dir), model_name, gpus)
            made.made = [*made.made, made.path]
        return made
    if run_dir is not None:
        path = Path(run_dir)
        check_output_path(path, "run_dir", directory=True)
        made.made = _missing_parents(path)
        try:
            with _signals_held():
                path.mkdir(parents=True, exist_ok=True)
                made.path = path
        except OSError as err:
            raise AutotuneError("run_dir", f"cannot create {str(path)!r}: {err.strerror}") from None
    return made


@contextmanager
def _signals_held():
    """SIGINT and SIGTERM that come during the block reach their handlers once it ends (in the main
    thread; elsewhere no handler runs in this thread anyway). Their handlers are swapped, not the
    thread's signal mask: a native thread that blocks nothing (OpenBLAS's pool, started when numpy
    loads) takes a signal the main thread blocks, and CPython still runs its handler in the main
    thread at once (scripts/diag_signals_held.py)."""
    import threading

    held = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not None]  # None: not Python's to set
    if threading.current_thread() is not threading.main_thread() or not held:
        yield
        return
    previous = [(s, signal.getsignal(s)) for s in held]  # read before any is swapped: all are put back
    caught: list[int] = []
    try:
        for signum in held:
            signal.signal(signum, lambda number, _frame: caught.append(number))
        yield
    finally:
        _put_back(previous)
        if caught:  # the first one, now to its own handler (an interrupt raised here, after the block)
            signal.raise_signal(caught[0])


def _put_back(handlers: list[tuple[int, Any]]) -> None:
    """Each signal's handler back, every one even when a signal landing in between raises."""
    if handlers:
        try:
            signal.signal(*handlers[0])
        finally:
            _put_back(handlers[1:])


def study_db_summary(db: Path) -> list[tuple[str, int]] | None:
    """(study name, finished trials) of each study in an Optuna SQLite file, read without writing
    to it (no schema is created in an empty file); [] for no file or no studies, None when
    the file cannot be read as a study database."""
    import sqlite3

    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(read_only_uri(db), uri=True)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "studies" not in tables:
                return [] if not tables else None
            rows = conn.execute("SELECT s.study_name, (SELECT COUNT(*) FROM trials t WHERE t.study_id = s.study_id "
                                "AND t.state IN ('COMPLETE', 'PRUNED')) FROM studies s").fetchall()
            return [(str(name), int(count)) for name, count in rows]
    except sqlite3.Error:
        return None


def read_only_uri(db: Path) -> str:
    """An SQLite URI that reads ``db`` and creates nothing beside it: with no write-ahead log
    present every commit is in the file (``immutable``: no -shm/-wal made); with one, a
    read-only connection that also reads the log."""
    wal = db.with_name(db.name + "-wal")
    return sqlite_uri(db, **({"mode": "ro"} if wal.exists() else {"immutable": "1"}))


def check_study_target(run_dir: Path | None, storage: str | None, name: str) -> None:
    """A run's study.db holds its own search's study only: a shared ``storage`` may not be a
    run's study file, and a run directory given again may only continue the study ``name``."""
    db = sqlite_file(storage) if storage is not None else None
    links = db.stat().st_nlink if db is not None and db.is_file() else 1
    # SQLite keeps a database's journal and WAL beside the name it was opened by: two names of one
    # file (a run's study.db linked elsewhere) get two journals and corrupt it (sqlite.org/howtocorrupt.html 2.4)
    require(links == 1, "storage", f"{str(db)!r} has {links} names (hard links), and SQLite corrupts a database "
                                   "opened by two names; give the file itself (for a run's study.db: autotune search "
                                   "--resume RUN)")
    if db is not None and db.resolve().name == STUDY_FILE:
        run = db.parent if db.name == STUDY_FILE else db.resolve().parent  # (a link to a run's study: the run)
        raise AutotuneError("storage", f"{str(db)!r} is a run's own study ({STUDY_FILE}), not a shared one; continue "
                                       f"that run with autotune search --resume {shell_word(run)}, or name "
                                       "the shared database otherwise")
    if storage is None and run_dir is not None:
        names = [n for n, _ in study_db_summary(run_dir / STUDY_FILE) or ()]
        if names not in ([], [name]):
            raise AutotuneError("run_dir", f"{str(run_dir)!r} holds the study of another search "
                                           f"({', '.join(names)}); give a new directory")


def study_url(run_dir: Path) -> str:
    """The storage URL of a run's study (any characters in the path: autotune.plan.sqlite_url)."""
    return sqlite_url(run_dir / STUDY_FILE)


def write_run(run_dir: Path, *, plan_file: dict[str, Any], search: dict[str, Any], report: str) -> None:
    """plan.json (the plan file), search.json (result and problem), report.md: all or none (a
    run with plan.json is a finished one; a failed write, a full disk, leaves the study only)."""
    atomic_write_texts({run_dir / "plan.json": json.dumps(plan_file, indent=2, default=str) + "\n",
                        run_dir / "search.json": json.dumps(search, indent=2, default=str) + "\n",
                        run_dir / "report.md": report}, "run_dir")


def load_search_record(run_dir: str | Path, check=None) -> tuple[Path, dict[str, Any]]:
    """A finished run's directory and its search.json, checked by ``check(data, path)`` where given
    (autotune.search.record.check_search_record: the search layer knows the classes that wrote it)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise AutotuneError("run", f"{str(path)!r} is not a run directory")
    record = path / "search.json"
    if not record.exists():
        read_plan_file(path)  # raises a clear error if plan.json is missing too
        raise AutotuneError("run", f"{str(path)!r} has no search.json (an unfinished search? resume it with --resume)")
    from autotune.spec.json_file import read_json_file

    data = read_json_file(record, "run")  # binary, a FIFO, NaN, nested too deep: one line
    if check is not None:
        check(data, record)
    return path, data
