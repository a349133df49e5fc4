"""The compiled code of the methods ``dataclasses`` writes, kept between runs of the command line.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as Python source and compiles it when the class is made, at
import. Python caches the bytecode of modules, not of that source: `autotune search --model large
--gpus 16` makes 59 dataclasses, about 176 KB of generated source, and compiling it was a fifth
of the command's instructions (valgrind: 1124 M, 867 M with this cache). Here the command line
keeps the compiled code in a file beside its bytecode cache and later runs load it instead.

Nothing changes but where the code object comes from: each is looked up by its exact source text
and is what ``exec`` of that text makes (``compile`` with the file name ``exec`` gives a string and
no inherited ``__future__`` flags, as ``dataclasses`` has none). The file is named by the
interpreter's cache tag and optimisation level, so another Python never reads it; it is written
only where Python writes bytecode (``sys.dont_write_bytecode``, ``PYTHONPYCACHEPREFIX``), by an
atomic rename; a missing, unreadable or foreign file is an empty cache. Only the command line
installs it (the library leaves ``dataclasses`` as it is in its users' processes).
"""

from __future__ import annotations

import builtins
import os
import sys
import types

__all__ = ["install", "uninstall", "save", "cache_path"]

_MAX_ENTRIES = 4096  # a file past this many texts starts again (classes edited over many versions)
_cached: dict[str, object] = {}  # source text -> code, as read from the file
_new: dict[str, object] = {}  # compiled in this process, not in the file yet
_installed: list[object] = []  # the dataclasses module, while installed


def cache_path() -> str | None:
    """Where the cache lives: beside this module's bytecode (so under PYTHONPYCACHEPREFIX where
    set); None where the interpreter keeps no bytecode cache."""
    from importlib.util import cache_from_source

    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    folder = os.path.dirname(cache_from_source(__file__))
    return os.path.join(folder, f"dataclass_code.{tag}.opt{sys.flags.optimize}.marshal")


def _exec(source, globals=None, locals=None, /):  # noqa: A002  (the signature of builtins.exec)
    if type(source) is str:
        code = _cached.get(source) or _new.get(source)
        if code is None:
            code = _new[source] = compile(source, "<string>", "exec", dont_inherit=True)
        source = code
    builtins.exec(source, globals, locals)


def _read(path: str) -> dict[str, object]:
    import marshal

    try:
        with open(path, "rb") as f:
            data = marshal.loads(f.read())  # marshal.load(f) reads the file a few bytes at a time: ten times the cost
    except (OSError, EOFError, ValueError, TypeError):  # none yet, unreadable, or written by another build
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, types.CodeType)}


def install() -> None:
    """From now on the classes ``dataclasses`` makes take their methods' code from the cache."""
    import dataclasses

    if _installed:
        return
    path = cache_path()
    _cached.update(_read(path) if path else {})
    dataclasses.exec = _exec  # the module's global ``exec`` shadows the builtin it calls
    _installed.append(dataclasses)


def uninstall() -> None:
    """Back to Python's own: ``dataclasses`` compiles every class's methods again."""
    for module in _installed:
        vars(module).pop("exec", None)
    _installed.clear()
    _cached.clear()
    _new.clear()


def save() -> None:
    """Write what this process compiled into the cache file (nothing when it compiled nothing, or
    where Python writes no bytecode); a file that cannot be written is left as it was."""
    import marshal

    path = cache_path()
    if not _new or path is None or sys.dont_write_bytecode:
        return
    kept = _read(path)
    data = {**(kept if len(kept) + len(_new) <= _MAX_ENTRIES else {}), **_new}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(data))
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one, whole
    except OSError:  # a read-only install, a full disk: the next run compiles again
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return
    _cached.update(_new)
    _new.clear()
