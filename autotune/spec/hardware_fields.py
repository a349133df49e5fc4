"""Checked fields of a hardware file (device, link, cluster or profile table): each reader returns
the value or raises AutotuneError naming where it sits, and numbers are held to physical bounds."""

from __future__ import annotations

import math
from typing import Any

from autotune.errors import AutotuneError, closest
from autotune.spec.limits import check_limit
from autotune.spec.typed_fields import shown

__all__ = ["BOUNDS", "count_field", "flag_field", "known_keys", "number_field", "optional_count", "table_field",
           "text_field", "texts_field"]


def table_field(data: Any, key: str, where: str, *, required: bool = True) -> dict[str, Any]:
    """``data[key]``, an object (a table); {} when absent and not ``required``."""
    if not isinstance(data, dict):
        raise AutotuneError(where, f"must be a table, got {shown(data)}")
    value = data.get(key)
    if value is None and not required:
        return {}
    if value is None:
        raise AutotuneError(f"{where}.{key}", "is missing")
    if not isinstance(value, dict):
        raise AutotuneError(f"{where}.{key}", f"must be a table, got {shown(value)}")
    return value


def text_field(data: dict, key: str, where: str, default: str | None = "") -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        what = "is missing" if value is None else f"must be a string, got {shown(value)}"
        raise AutotuneError(f"{where}.{key}", what)
    return value


def texts_field(data: dict, key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AutotuneError(f"{where}.{key}", f"must be a list of strings, got {shown(value)}")
    return tuple(value)


def flag_field(data: dict, key: str, where: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise AutotuneError(f"{where}.{key}", f"must be true or false, got {shown(value)}")
    return value


# Physical bounds on what a hardware file states, each far beyond any real device: a value
# outside is a typo (1e-300 GB/s would price a step at 1e300 s). unit -> (least, most, why).
BOUNDS = {"bytes_per_s": (1e3, 1e16, "bytes/s: the fastest memories move about 2e13 (B200 L2), networks 1e11 a GPU"),
           "flops": (1e6, 1e18, "FLOP/s: the fastest chips reach about 2e16 (B200 dense FP4 9e15, datasheet)"),
           "bytes": (0.0, 2.0 ** 60, "bytes: the largest memories a device reaches are about 2e13 (2 TB host DDR)")}


def number_field(data: dict, key: str, where: str, bound: str | None = None) -> float:
    """A finite number >= 0 (within ``BOUNDS[bound]`` where given)."""
    if not isinstance(data, dict):
        raise AutotuneError(where, f"must be a table, got {shown(data)}")
    value = data.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise AutotuneError(f"{where}.{key}", f"must be a finite number, got {shown(value)}")
    if value < 0:
        raise AutotuneError(f"{where}.{key}", f"must be >= 0, got {value!r}")
    if bound is not None:
        least, most, why = BOUNDS[bound]
        if not least <= value <= most:
            raise AutotuneError(f"{where}.{key}", f"{value:g} is outside {least:g} .. {most:g} {why}")
    return float(value)


def count_field(data: dict, key: str, where: str, limit: str | None = None) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise AutotuneError(f"{where}.{key}", f"must be a positive integer, got {shown(value)}")
    if limit is not None:
        check_limit(f"{where}.{key}", value, limit)
    return value


def known_keys(data: dict, keys: tuple[str, ...], where: str) -> None:
    """A key the reader does not know is a typo (``bandwith``) that would silently keep the default."""
    for key in data:
        if key not in keys:
            near = closest(str(key), keys)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise AutotuneError(f"{where}.{key}", f"is not a key here{hint}; keys: {', '.join(keys)}")


def optional_count(data: dict, key: str, where: str, limit: str | None = None) -> int | None:
    return None if data.get(key) is None else count_field(data, key, where, limit)
