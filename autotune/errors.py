"""The one exception type that means "the input was wrong": the CLI prints it on one line, exits 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["AutotuneError", "NoPlanError", "Interrupted", "closest", "require", "require_positive", "require_choice",
           "require_type", "write_failure"]


class AutotuneError(ValueError):
    """Bad input or an unsatisfiable request.

    ``field`` names what was wrong (a CLI flag, a config key, a spec field); the message says
    what would be valid. ``str(err)`` is one line: ``field: message``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NoPlanError(AutotuneError):
    """The request was valid but its answer is negative: no plan fits or meets the targets.
    The CLI prints it on one line and exits 1 (not 2: nothing the user typed was wrong)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``note`` says what finished work was kept (the CLI exits 130)."""

    def __init__(self, note: str = "") -> None:
        super().__init__(note)
        self.note = note


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The names in ``choices`` that look most like ``name`` (for "did you mean" hints)."""
    if not isinstance(name, str):  # a library caller's 5 or None: no name looks like it
        return []
    pool = list(choices)
    hits = difflib.get_close_matches(name, pool, n=n, cutoff=0.4)
    if not hits:
        lowered = name.lower()
        hits = [c for c in pool if lowered in c.lower() or c.lower() in lowered][:n]
    return hits


def require(condition: bool, field: str, message: str) -> None:
    """Raise :class:`AutotuneError` unless ``condition`` holds."""
    if not condition:
        raise AutotuneError(field, message)


def require_positive(field: str, value: object, *, integer: bool = True) -> None:
    """Sizes and counts must be positive numbers (integers unless ``integer=False``)."""
    kind = int if integer else (int, float)
    if not (isinstance(value, kind) and not isinstance(value, bool) and value > 0):  # the message only when raised
        raise AutotuneError(field, f"must be a positive {'integer' if integer else 'number'}, got {value!r}")


def require_choice(field: str, value: object, choices: Iterable[object]) -> None:
    """``value`` must be one of ``choices``; the error lists them."""
    options = list(choices)
    if value not in options:
        hint = ""
        if isinstance(value, str):
            near = closest(value, [str(c) for c in options])
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
        listed = ", ".join(str(c) for c in options)
        raise AutotuneError(field, f"{value!r} is not valid; choose one of: {listed}{hint}")


def require_type(field: str, value: object, types: type | tuple[type, ...], what: str) -> None:
    """``value`` must be an instance of ``types`` (bool is never an int here); ``what`` says what is valid."""
    kinds = types if isinstance(types, tuple) else (types,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    require(ok, field, f"must be {what}, got {value!r} ({type(value).__name__})")


# A write the file system refused: disk full, quota, file too large, read-only, I/O error.
_WRITE_ERRNOS = {"ENOSPC": "no space left on the device", "EDQUOT": "disk quota exceeded",
                 "EFBIG": "file too large", "EROFS": "read-only file system", "EIO": "input/output error"}
_SQLITE_SIGNS = {"database or disk is full": "no space left on the device",
                 "attempt to write a readonly database": "read-only database or file system",
                 "disk I/O error": "input/output error"}


def write_failure(err: BaseException, note: str = "", path: object = None) -> AutotuneError | None:
    """``err`` as one line when it means the file system refused a write (``OSError`` ENOSPC,
    EDQUOT, EFBIG, EROFS, EIO; SQLite's "database or disk is full" and the like, also wrapped by
    SQLAlchemy or Optuna); None for any other error. ``path``: the file written (else the
    error's own); ``note`` (what was kept) ends the message."""
    for cause in _causes(err):
        reason, target = _write_reason(cause, path)
        if reason is not None:
            return AutotuneError("disk", f"cannot write {target}: {reason}" + (f"; {note}" if note else ""))
    return None


def _causes(err: BaseException | None, depth: int = 8) -> list[BaseException]:
    """``err``, the driver error SQLAlchemy wraps (``orig``), and what it was raised from."""
    chain: list[BaseException] = []
    while err is not None and len(chain) < depth:
        chain.append(err)
        orig = getattr(err, "orig", None)
        if isinstance(orig, BaseException):
            chain.append(orig)
        err = err.__cause__ or err.__context__
    return chain


def _write_reason(cause: BaseException, path: object) -> tuple[str | None, str]:
    import errno

    if isinstance(cause, OSError):
        reason = next((text for name, text in _WRITE_ERRNOS.items() if cause.errno == getattr(errno, name, -1)), None)
        where = path if path is not None else cause.filename
        return reason, repr(str(where)) if where is not None else "a file"
    text = str(cause) if type(cause).__module__ == "sqlite3" else ""
    return next((why for sign, why in _SQLITE_SIGNS.items() if sign in text), None), "the study database"
