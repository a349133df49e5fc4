"""Run directories: runs/<timestamp>-<model>-<gpus>/ with plan.json, study.db, search.json, report.md."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError
from autotune.plan.io import atomic_write_text, read_plan_file

__all__ = ["create_run_dir", "check_writable", "study_url", "write_run", "load_search_record", "STUDY_FILE"]

STUDY_FILE = "study.db"


def check_writable(root: Path) -> None:
    """Fail early, before any work, when runs cannot be written under ``root``."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{time.time_ns()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise AutotuneError("run_dir", f"cannot write run directories under {str(root)!r}: {err.strerror}") from None


def create_run_dir(root: Path, model_name: str, gpus: int) -> Path:
    check_writable(root)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_name).strip("-") or "model"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(100):
        path = root / f"{stamp}-{slug}-{gpus}" if i == 0 else root / f"{stamp}-{slug}-{gpus}-{i}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise AutotuneError("run_dir", f"cannot create a new run directory under {str(root)!r}")


def study_url(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / STUDY_FILE).resolve()}"


def write_run(run_dir: Path, *, plan_file: dict[str, Any], search: dict[str, Any], report: str) -> None:
    """plan.json (the plan file), search.json (result and problem), report.md; each atomically."""
    atomic_write_text(run_dir / "plan.json", json.dumps(plan_file, indent=2, default=str) + "\n")
    atomic_write_text(run_dir / "search.json", json.dumps(search, indent=2, default=str) + "\n")
    atomic_write_text(run_dir / "report.md", report)


def load_search_record(run_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """A finished run's directory and its search.json."""
    path = Path(run_dir)
    if not path.is_dir():
        raise AutotuneError("run", f"{str(path)!r} is not a run directory")
    record = path / "search.json"
    if not record.exists():
        read_plan_file(path)  # raises a clear error if plan.json is missing too
        raise AutotuneError("run", f"{str(path)!r} has no search.json (an unfinished search? resume it with --resume)")
    try:
        return path, json.loads(record.read_text())
    except json.JSONDecodeError as err:
        raise AutotuneError("run", f"{str(record)!r} is not valid JSON: {err}") from None
