"""Filesystem paths as SQLite URLs, and back: the one place a path becomes a database address.

A path is not a URL: ``#`` starts a fragment, ``?`` a query, ``%`` an escape, and Optuna
formats its storage URL as a template (``{`` and ``}``). Put into ``sqlite:///`` or ``file:``
unescaped, ``runs/my#runs/R/study.db`` names ``runs/my`` -- which SQLite then creates. Every
path is therefore made absolute and percent-escaped here; SQLAlchemy (``make_url``) and SQLite
(URI filenames) both decode the escapes back to the exact path.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import quote, urlencode

from autotune.errors import require

__all__ = ["sqlite_url", "sqlite_uri", "sqlite_file", "shell_word"]


def _escaped(db: str | Path) -> str:
    return quote(str(Path(db).resolve()), safe="/")


def sqlite_url(db: str | Path) -> str:
    """The SQLAlchemy (and Optuna) storage URL of the SQLite file ``db``."""
    return f"sqlite:///{_escaped(db)}"


def sqlite_uri(db: str | Path, **query: str) -> str:
    """An SQLite URI filename of ``db`` for ``sqlite3.connect(uri, uri=True)``, with ``query``
    parameters (``mode="ro"``, ``immutable="1"``)."""
    return f"file:{_escaped(db)}" + (f"?{urlencode(query)}" if query else "")


def sqlite_file(url: str) -> Path | None:
    """The file an SQLite storage URL names, decoded as SQLAlchemy decodes it; None for
    another database, an in-memory one, or a URL SQLAlchemy cannot parse. A URL with a query
    is refused (AutotuneError "storage")."""
    if not url.startswith("sqlite"):
        return None
    _, mark, query = url.partition("?")
    # SQLAlchemy's SQLite dialect drops a query item without '=' and ignores unknown ones (mode=ro
    # still wrote): 'sqlite:///s?x.db' silently named the file 's'
    require(not mark, "storage", f"{url!r} has a query ('?{query[:40]}'), which autotune's SQLite storages do not take; "
                                 "write a '?' in the file name as %3F (a '%' as %25)")
    # Optuna formats the URL as a template: a literal brace fails there with a bare KeyError
    require("{" not in url and "}" not in url, "storage", f"{url!r}: write '{{' and '}}' in a file name as %7B and %7D")
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def shell_word(path: str | Path) -> str:
    """``path`` as one word for a command line a person copies (spaces, ``#``, quotes)."""
    return shlex.quote(str(path))
