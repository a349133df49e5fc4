"""Field types as a dataclass declares them, checked on values as JSON or TOML holds them (a list
where a tuple is declared): the generic part of every reader (plan files, search records, spaces,
profiles), in the spec layer so that spec's own readers can use it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import types
import typing
from typing import Any

from autotune.errors import require
from autotune.spec.json_file import field_path

__all__ = ["check_fields", "check_value", "shown"]

_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def shown(value: Any) -> str:
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
    require(isinstance(data, dict), where, f"must be an object of {cls.__name__} fields, got {shown(data)}")
    hints = _hints(cls)
    for name, value in data.items():
        if name in hints:
            check_value(value, hints[name], field_path(where, name))


def check_value(value: Any, hint: Any, where: str) -> None:
    """``value`` (as JSON or TOML holds it: a list for a tuple) of the declared type ``hint``;
    the error names ``where``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if (value is None and len(options) < len(args)) or len(options) != 1:
            return  # None where allowed; a union of several types is the constructor's to check
        hint, origin, args = options[0], typing.get_origin(options[0]), typing.get_args(options[0])
    if origin in (dict, collections.abc.Mapping):
        require(isinstance(value, dict), where, f"must be an object, got {shown(value)}")
        for key, item in value.items():
            check_value(item, args[1] if len(args) == 2 else Any, field_path(where, key))
    elif origin is tuple:
        require(isinstance(value, list), where, f"must be a list, got {shown(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            for i, item in enumerate(value):
                check_value(item, args[0], field_path(where, i))
            return
        require(len(value) == len(args), where, f"must be a list of {len(args)}, got {shown(value)}")
        for i, (item, item_hint) in enumerate(zip(value, args)):
            check_value(item, item_hint, field_path(where, i))
    elif dataclasses.is_dataclass(hint):
        check_fields(value, hint, where)
    elif hint in _KINDS:
        ok = isinstance(value, bool) if hint is bool else (
            isinstance(value, (int, float) if hint is float else hint) and not isinstance(value, bool))
        require(ok, where, f"must be {_KINDS[hint]}, got {shown(value)}")
