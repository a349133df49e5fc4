"""Reading plans from files: a plan.json or a run directory holding one."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.plan.plan import Plan

__all__ = ["read_plan"]


def read_plan(path: str | Path) -> Plan:
    """A plan from ``plan.json`` or from a run directory's ``plan.json``."""
    target = Path(path)
    if target.is_dir():
        target = target / "plan.json"
    try:
        data = json.loads(target.read_text())
    except OSError as err:
        raise AutotuneError("plan", f"cannot read {str(target)!r}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise AutotuneError("plan", f"{str(target)!r} is not valid JSON: {err}") from None
    return Plan.from_dict(data.get("plan", data) if isinstance(data, dict) else data)
