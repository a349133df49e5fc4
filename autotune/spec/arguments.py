"""Checks of the library entry points' arguments: a wrong type, an unknown keyword or a missing
argument raises AutotuneError naming the argument, as the CLI's flags do (not a TypeError from
deep inside). ``entry_point(checks)`` wraps a function; ``checks`` maps an argument to a check."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, require_positive, require_type

__all__ = ["entry_point", "model_arg", "cluster_arg", "profile_arg", "workload_arg", "runtime_arg", "count_arg", "optional_count_arg",
           "int_arg", "optional_int_arg", "seed_arg", "MAX_SEED", "text_arg", "optional_text_arg", "path_arg", "optional_path_arg", "callable_arg", "bool_arg"]

Check = Callable[[str, Any], None]


def model_arg(name: str, value: Any) -> None:
    from autotune.spec.model import ModelSpec

    require_type(name, value, (str, Path, ModelSpec), "a preset name, a path to a config.json, or a ModelSpec")


def cluster_arg(name: str, value: Any) -> None:
    from autotune.spec.hardware import ClusterSpec

    require_type(name, value, (str, Path, ClusterSpec), "a cluster preset name, a cluster file, or a ClusterSpec")


def profile_arg(name: str, value: Any) -> None:
    if value is not None:
        require_type(name, value, (str, Path, dict), "None, a profile JSON path, or a profile dict")


def workload_arg(name: str, value: Any) -> None:
    from autotune.spec.workload import InferenceWorkload, TrainingWorkload

    if value is not None:
        require_type(name, value, (TrainingWorkload, InferenceWorkload),
                     "None (the preset's training step) or a TrainingWorkload / InferenceWorkload")


def runtime_arg(name: str, value: Any) -> None:
    from autotune.spec.runtime import Runtime

    if value is not None:
        require_type(name, value, (str, Runtime), "None (megatron), a runtime name, or a Runtime")


def count_arg(name: str, value: Any) -> None:
    require_positive(name, value)


def optional_count_arg(name: str, value: Any) -> None:
    if value is not None:
        require_positive(name, value)


def int_arg(name: str, value: Any) -> None:
    require_type(name, value, int, "an integer")


def optional_int_arg(name: str, value: Any) -> None:
    if value is not None:
        require_type(name, value, int, "None or an integer")


MAX_SEED = 2**32 - 1  # numpy's generators (Optuna's samplers) take seeds 0 .. 2**32 - 1


def seed_arg(name: str, value: Any) -> None:
    require_type(name, value, int, "an integer")
    if not 0 <= value <= MAX_SEED:
        raise AutotuneError(name, f"must be between 0 and {MAX_SEED} (a numpy seed), got {value}")


def bool_arg(name: str, value: Any) -> None:
    require_type(name, value, bool, "True or False")


def text_arg(name: str, value: Any) -> None:
    require_type(name, value, str, "a string")


def optional_text_arg(name: str, value: Any) -> None:
    if value is not None:
        require_type(name, value, str, "None or a string")


def path_arg(name: str, value: Any) -> None:
    require_type(name, value, (str, Path), "a path")


def optional_path_arg(name: str, value: Any) -> None:
    if value is not None:
        require_type(name, value, (str, Path), "None or a path")


def callable_arg(name: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise AutotuneError(name, f"must be None or a callable, got {value!r}")


def entry_point(checks: dict[str, Check], *, extra: Callable[[], set[str]] | None = None,
                excludes: dict[str, dict[str, str | None]] | None = None):
    """Wrap a library entry point: unknown keywords (beyond ``extra()`` for a ``**kwargs``
    catch-all), missing arguments and failed ``checks`` raise AutotuneError naming the argument.
    ``excludes`` maps an argument to those it gives: when it is given (not None), each of them
    (``**`` for the catch-all's keywords) must keep its default or, where an attribute is named,
    equal that attribute of it; else the call is refused (a value that would be ignored)."""
    def wrap(fn):
        sig = inspect.signature(fn)
        named = {n for n, p in sig.parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            allowed = named | (extra() if extra else set())
            for key in kwargs:
                if key not in allowed:
                    raise AutotuneError(key, f"is not an argument of autotune.{fn.__name__}(); valid: "
                                             f"{', '.join(sorted(allowed))}")
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as err:
                missing = re.search(r"'(\w+)'", str(err))
                raise AutotuneError(missing.group(1) if missing else fn.__name__, str(err)) from None
            bound.apply_defaults()
            for key, check in checks.items():
                check(key, bound.arguments[key])
            _refuse_excluded(sig, bound.arguments, excludes or {}, fn.__name__)
            return fn(*args, **kwargs)
        return call
    return wrap


def _refuse_excluded(sig: inspect.Signature, given: dict[str, Any], excludes: dict[str, dict[str, str | None]],
                     name: str) -> None:
    catch_all = next((n for n, p in sig.parameters.items() if p.kind == p.VAR_KEYWORD), None)
    for key, others in excludes.items():
        source = given.get(key)
        if source is None:
            continue
        for other, attribute in others.items():
            if other == "**":
                extra = sorted(given.get(catch_all) or {}) if catch_all else []
                if extra:
                    raise AutotuneError(extra[0], f"conflicts with {key}= in autotune.{name}(): {key} gives it; drop it")
                continue
            value = given[other]
            if value == sig.parameters[other].default:
                continue
            if attribute is None:
                raise AutotuneError(other, f"conflicts with {key}= in autotune.{name}(): {key} gives it; drop {other}")
            if value != getattr(source, attribute):
                raise AutotuneError(other, f"{value!r} conflicts with the {key}'s {attribute} "
                                           f"{getattr(source, attribute)!r} in autotune.{name}(): give one of them")
