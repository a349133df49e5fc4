"""Reading the files a person may hand autotune (plan files, search.json, config.json, cluster files,
profiles, search spaces) defensively.

Whatever the file is -- binary, a FIFO or a device, a directory, nested 100,000 deep, holding
``NaN`` or ``1e999`` -- the answer comes at once: the document, or an AutotuneError naming the
file or the field (``plan.stages[0].layers[1]: must be a finite number, got Infinity``).
The checks of what each kind of file must hold are in autotune.plan.checks (plan files),
autotune.search.record (search records) and the readers of each kind (spec, search, calibrate).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError

__all__ = ["read_json_file", "read_text_file", "read_csv_file", "check_tree", "MAX_BYTES", "MAX_DEPTH", "field_path"]

MAX_BYTES = 256 << 20  # a search.json of many thousand slices is a few MB
MAX_DEPTH = 64  # plan files and search records are under ten levels deep
_INT_LIMIT = 1 << 63


class _NonFinite(str):
    """``NaN``, ``Infinity`` or ``-Infinity`` as the file spelled it (JSON has no such numbers)."""


def read_text_file(path: str | Path, field: str) -> str:
    """The text of a regular file, read without blocking (a FIFO or a device is refused, not
    waited on), at most MAX_BYTES, as UTF-8."""
    target = Path(path)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise AutotuneError(field, f"cannot read {str(target)!r}: {err.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise AutotuneError(field, f"cannot read {str(target)!r}: it is {kind}; give a file")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise AutotuneError(field, f"{str(target)!r} is larger than {MAX_BYTES >> 20} MiB; not a file autotune wrote")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AutotuneError(field, f"{str(target)!r} is not UTF-8 text (byte {err.start}); a binary file?") from None


def read_csv_file(path: str | Path, field: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a CSV file, read as read_text_file reads (no FIFO or device waited on,
    bounded, UTF-8); a file with no header or no row is refused."""
    import csv
    import io

    text = read_text_file(path, field)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = list(reader)
    except csv.Error as err:
        raise AutotuneError(field, f"{str(path)!r} is not a readable CSV: {err}") from None
    if not reader.fieldnames or not rows:
        raise AutotuneError(field, f"{str(path)!r} holds {'no header' if not reader.fieldnames else 'no rows'}; "
                                   "give a CSV with a header line and one row per run")
    return list(reader.fieldnames), rows


def read_json_file(path: str | Path, field: str, root: str | None = "") -> Any:
    """The JSON document in ``path``: parsed, at most MAX_DEPTH deep, every number finite and
    within 64 bits. ``field`` names the file in errors, ``root`` the document in field paths
    (None: the caller calls check_tree, once it knows what the document is)."""
    target = Path(path)
    text = read_text_file(target, field)
    try:
        data = json.loads(text, parse_constant=_NonFinite)
    except json.JSONDecodeError as err:
        raise AutotuneError(field, f"{str(target)!r} is not valid JSON: {err}") from None
    except RecursionError:
        raise AutotuneError(field, f"{str(target)!r} is nested too deeply (over {MAX_DEPTH} levels)") from None
    except ValueError as err:  # an integer of thousands of digits
        raise AutotuneError(field, f"{str(target)!r} holds a number out of range: {str(err).split(';')[0]}") from None
    if root is not None:
        check_tree(data, root, target)
    return data


def field_path(base: str, key: Any) -> str:
    """``base.key``, or ``base[i]`` for a list index: how errors name a field."""
    return f"{base}[{key}]" if isinstance(key, int) else f"{base}.{key}" if base else str(key)


def check_tree(data: Any, root: str, source: str | Path) -> None:
    """Depth at most MAX_DEPTH, and no NaN, infinity or huge integer anywhere; the error names
    the field (its path from ``root``) and the file ``source``."""
    stack: list[tuple[Any, str, int]] = [(data, root, 0)]
    while stack:
        value, where, depth = stack.pop()
        problem = _number_problem(value)
        if problem is None and isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
            problem = f"is nested too deeply (over {MAX_DEPTH} levels)"
        if problem is not None:
            raise AutotuneError(where or "document", f"{problem} (in {str(source)!r})")
        if isinstance(value, (dict, list)):
            items = list(value.items() if isinstance(value, dict) else enumerate(value))
            stack.extend((item, field_path(where, key), depth + 1) for key, item in reversed(items))  # in file order


def _number_problem(value: Any) -> str | None:
    if isinstance(value, _NonFinite) or (isinstance(value, float) and not math.isfinite(value)):
        return f"must be a finite number, got {value}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_LIMIT:
        return f"must be a number below 2**63, got {str(value)[:20]}..."
    return None
