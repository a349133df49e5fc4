"""What each kind of JSON file must hold, field by field: a plan file (plan.json, or a bare
plan), and a run's search record (search.json). The file has been read by
autotune.plan.json_file (every number finite); here each field gets the type its dataclass
declares (an integer for ``layers``, an object for ``model``), so that nonsense is one line
naming the field and the file, never an exception deep inside the cost model.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, require
from autotune.plan.json_file import field_path

__all__ = ["check_fields", "check_plan_document", "check_search_record"]

_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}..." if len(text) > 60 else text


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The declared type of each field of ``cls``, and of each property its to_dict may add
    (a plan's ``pp``, ``dp``, ``global_batch``)."""
    names = {f.name for f in dataclasses.fields(cls)}
    hints = {k: v for k, v in typing.get_type_hints(cls).items() if k in names}
    for name, attr in vars(cls).items():
        if isinstance(attr, property) and attr.fget is not None:
            returns = typing.get_type_hints(attr.fget).get("return")
            if returns in _KINDS:
                hints.setdefault(name, returns)
    return hints


def check_fields(data: Any, cls: type, where: str) -> None:
    """``data`` as the fields of dataclass ``cls``: a JSON object whose known keys have the
    types ``cls`` declares (unknown keys are left alone; missing ones are the constructor's)."""
    require(isinstance(data, dict), where, f"must be an object of {cls.__name__} fields, got {_shown(data)}")
    hints = _hints(cls)
    for name, value in data.items():
        if name in hints:
            _check_value(value, hints[name], field_path(where, name))


def _check_value(value: Any, hint: Any, where: str) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if (value is None and len(options) < len(args)) or len(options) != 1:
            return  # None where allowed; a union of several types is the constructor's to check
        hint, origin, args = options[0], typing.get_origin(options[0]), typing.get_args(options[0])
    if origin in (dict, collections.abc.Mapping):
        require(isinstance(value, dict), where, f"must be an object, got {_shown(value)}")
        for key, item in value.items():
            _check_value(item, args[1] if len(args) == 2 else Any, field_path(where, key))
    elif origin is tuple:
        require(isinstance(value, list), where, f"must be a list, got {_shown(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            for i, item in enumerate(value):
                _check_value(item, args[0], field_path(where, i))
            return
        require(len(value) == len(args), where, f"must be a list of {len(args)}, got {_shown(value)}")
        for i, (item, item_hint) in enumerate(zip(value, args)):
            _check_value(item, item_hint, field_path(where, i))
    elif dataclasses.is_dataclass(hint):
        check_fields(value, hint, where)
    elif hint in _KINDS:
        ok = isinstance(value, bool) if hint is bool else (
            isinstance(value, (int, float) if hint is float else hint) and not isinstance(value, bool))
        require(ok, where, f"must be {_KINDS[hint]}, got {_shown(value)}")


def _in_file(check, source: str | Path):
    """Run ``check``; its error names the file too."""
    try:
        check()
    except AutotuneError as err:
        raise AutotuneError(err.field, f"{err.message} (in {str(source)!r})") from None


def _optional(data: dict, key: str, kinds: tuple[type, ...], what: str) -> None:
    value = data.get(key)
    require(value is None or isinstance(value, kinds), key, f"must be {what} or null, got {_shown(value)}")


def check_plan_document(data: Any, source: str | Path) -> None:
    """A plan file: ``{"schema", "plan", "model", "workload", "cluster", "profile", "estimate"}``,
    or a bare plan object."""
    from autotune.plan.plan import Plan

    def check() -> None:
        require(isinstance(data, dict), "plan", f"must be a JSON object, got {_shown(data)}")
        if "plan" not in data:
            return check_fields(data, Plan, "plan")
        require(isinstance(data.get("schema", ""), str), "schema", f"must be a string, got {_shown(data.get('schema'))}")
        check_fields(data["plan"], Plan, "plan")
        _optional(data, "model", (dict,), "an object of model fields")
        _optional(data, "workload", (dict,), "an object of workload fields")
        _optional(data, "cluster", (str, dict), "a cluster name or an object")
        _optional(data, "profile", (str, dict), "a profile path or an object")
        _optional(data, "estimate", (dict,), "an object")
        if data.get("estimate") is not None:
            check_fields(data["estimate"], _estimate_class(), "estimate")
        _check_cluster(data.get("cluster"))
        _check_model_and_workload(data)
    _in_file(check, source)


def _estimate_class() -> type:
    from autotune.cost.estimate import Estimate

    return Estimate


def _check_cluster(cluster: Any) -> None:
    if isinstance(cluster, dict):
        require(isinstance(cluster.get("name"), str), "cluster.name", f"must be a string, got {_shown(cluster.get('name'))}")
        require(isinstance(cluster.get("data"), dict), "cluster.data", f"must be an object, got {_shown(cluster.get('data'))}")


def _check_model_and_workload(data: dict) -> None:
    from autotune.plan.io import WORKLOAD_KINDS
    from autotune.spec.model import ModelSpec

    if data.get("model"):
        check_fields(data["model"], ModelSpec, "model")
    workload = data.get("workload")
    if workload:
        kind = workload.get("kind", "train")
        require(isinstance(kind, str) and kind in WORKLOAD_KINDS, "workload.kind", f"{_shown(kind)}; known: {', '.join(WORKLOAD_KINDS)}")
        check_fields(workload, WORKLOAD_KINDS[kind], "workload")


def check_search_record(data: Any, source: str | Path) -> None:
    """A run's search.json: the result (plan, estimate, baselines, stats), the problem, and
    the slices' history and points."""
    from autotune.plan.plan import Plan

    def check() -> None:
        require(isinstance(data, dict), "search", f"must be a JSON object, got {_shown(data)}")
        from autotune.search.result import SearchStats

        for key, cls in (("plan", Plan), ("estimate", _estimate_class()), ("stats", SearchStats)):
            require(isinstance(data.get(key), dict), key, f"must be an object, got {_shown(data.get(key))}")
            check_fields(data[key], cls, key)
        _optional(data, "problem", (dict,), "an object")
        _optional(data, "run_dir", (str,), "a string")
        for key in ("baselines", "slice_history", "slice_points"):
            require(isinstance(data.get(key, []), list), key, f"must be a list, got {_shown(data.get(key))}")
        from autotune.search.baselines import Baseline

        for i, baseline in enumerate(data.get("baselines", [])):
            require(isinstance(baseline, dict) and isinstance(baseline.get("name"), str), f"baselines[{i}]",
                    f"must be an object with a name, got {_shown(baseline)}")
            check_fields(baseline, Baseline, f"baselines[{i}]")
        _check_slices(data.get("slice_history", []), data.get("slice_points", []))
    _in_file(check, source)


def _check_slices(history: list, points: list) -> None:
    from autotune.plan.plan import Plan

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
