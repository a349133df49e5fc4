"""A shipped data file of named top-level TOML tables (models.toml, clusters.toml), read one table
at a time: a command asks for one preset, and tomllib (pure Python) takes about 5 ms for each of
those files whole. The file is split at its table headers (``[name]``, ``[name.sub]``,
``[[name.sub]]``); the blocks of the asked-for name are parsed together (with the comments
before the first header). Wherever that could differ from parsing the whole file (a header of
another form, a block that does not parse on its own or holds any other table) the whole file
is parsed instead; tests/test_lazy_imports.py checks every shipped table against the whole."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
import re
import tomllib
from typing import Any

__all__ = ["table_names", "table", "whole"]

_ANY_HEADER = re.compile(r"^[ \t]*\[", re.MULTILINE)
# A header whose first key is bare or a basic string without escapes; group 1 or 2 is that key.
_HEADER = re.compile(r'[ \t]*\[\[?[ \t]*(?:"([^"\\\n]*)"|([A-Za-z0-9_-]+))[ \t]*[.\]]')


@lru_cache(maxsize=None)
def whole(path: Path) -> dict[str, Any]:
    """The whole file, parsed once a process."""
    return tomllib.loads(path.read_text())


@lru_cache(maxsize=None)
def _split(path: Path) -> tuple[str, dict[str, str]] | None:
    """(text before the first header, each top-level name's header blocks), or None where a
    header is of a form not split on."""
    text = path.read_text()
    starts = [m.start() for m in _ANY_HEADER.finditer(text)]
    blocks: dict[str, list[str]] = {}
    for start, end in zip(starts, [*starts[1:], len(text)]):
        header = _HEADER.match(text, start)
        if header is None:
            return None
        name = header.group(1) if header.group(1) is not None else header.group(2)
        blocks.setdefault(name, []).append(text[start:end])
    return (text[:starts[0]] if starts else text), {name: "".join(parts) for name, parts in blocks.items()}


def table_names(path: Path) -> list[str]:
    """The file's top-level table names, in file order."""
    split = _split(path)
    return list(split[1]) if split is not None else list(whole(path))


@lru_cache(maxsize=None)
def table(path: Path, name: str) -> dict[str, Any] | None:
    """The top-level table ``name`` (the same object each call), or None."""
    split = _split(path)
    if split is None:
        return whole(path).get(name)
    preamble, blocks = split
    if name not in blocks:
        return None
    try:
        data = tomllib.loads(preamble + blocks[name])
    except tomllib.TOMLDecodeError:
        return whole(path).get(name)
    return data[name] if set(data) == {name} else whole(path).get(name)
