"""A run's search.json checked field by field against the classes that wrote it (the search's result,
the cost model's estimate), so a corrupt record is one line naming the field (autotune show)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.cost.estimate import Estimate
from autotune.errors import require
from autotune.plan.checks import _in_file, _optional, _shown, check_estimate_numbers, check_fields
from autotune.plan.plan import Plan
from autotune.search.baselines import Baseline
from autotune.search.result import SearchStats
from autotune.spec.runtime import Runtime

__all__ = ["check_search_record"]


def check_search_record(data: Any, source: str | Path) -> None:
    """A run's search.json: the result (plan, estimate, baselines, stats), the problem, and
    the slices' history and points."""
    def check() -> None:
        require(isinstance(data, dict), "search", f"must be a JSON object, got {_shown(data)}")
        for key, cls in (("plan", Plan), ("estimate", Estimate), ("stats", SearchStats)):
            require(isinstance(data.get(key), dict), key, f"must be an object, got {_shown(data.get(key))}")
            check_fields(data[key], cls, key)
        Plan.from_dict(data["plan"])  # the plan's own checks: degrees, layers, choices (types alone pass tp=0)
        check_estimate_numbers(data["estimate"])  # times, rates and bytes are >= 0
        _optional(data, "runtime", (dict,), "an object of runtime settings")
        if data.get("runtime") is not None:
            check_fields(data["runtime"], Runtime, "runtime")
        _optional(data, "problem", (dict,), "an object")
        _optional(data, "run_dir", (str,), "a string")
        for key in ("baselines", "slice_history", "slice_points"):
            require(isinstance(data.get(key, []), list), key, f"must be a list, got {_shown(data.get(key))}")
        for i, baseline in enumerate(data.get("baselines", [])):
            require(isinstance(baseline, dict) and isinstance(baseline.get("name"), str), f"baselines[{i}]",
                    f"must be an object with a name, got {_shown(baseline)}")
            check_fields(baseline, Baseline, f"baselines[{i}]")
        _check_slices(data.get("slice_history", []), data.get("slice_points", []))
    _in_file(check, source)


def _check_slices(history: list, points: list) -> None:
    for i, entry in enumerate(history):
        ok = (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int
              and (entry[1] is None or type(entry[1]) in (int, float)))
        require(ok, f"slice_history[{i}]", f"must be [order, step time or null], got {_shown(entry)}")
    for i, point in enumerate(points):
        where = f"slice_points[{i}]"
        require(isinstance(point, dict), where, f"must be an object, got {_shown(point)}")
        for key in ("tokens_per_s", "peak_memory_bytes_per_gpu"):
            require(type(point.get(key)) in (int, float), f"{where}.{key}", f"must be a number, got {_shown(point.get(key))}")
        check_fields(point.get("plan"), Plan, f"{where}.plan")
