"""A real PostgreSQL server for tests: ``postgres_url`` starts one from Debian's packages in a
temporary directory and yields a SQLAlchemy URL ``postgresql+psycopg://postgres@127.0.0.1:PORT/DB``.

initdb refuses to run as root, so under root the server runs as the ``postgres`` user (Debian's
package creates it). Without PostgreSQL binaries the tests skip, except under ``CI=true``, where
they fail: CI (.ci/run) installs them. Set ``AUTOTUNE_PG_BINDIR`` to use other binaries.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE = "autotune_test"


def pg_bindir() -> Path | None:
    """Directory with initdb and pg_ctl: $AUTOTUNE_PG_BINDIR, Debian's newest, or PATH."""
    candidates = [Path(os.environ["AUTOTUNE_PG_BINDIR"])] if os.environ.get("AUTOTUNE_PG_BINDIR") else []
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [p for p in debian.iterdir() if p.name.isdigit()]
        candidates += [p / "bin" for p in sorted(versions, key=lambda p: int(p.name), reverse=True)]
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).parent)
    return next((c for c in candidates if (c / "initdb").is_file() and (c / "pg_ctl").is_file()), None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(cmd: list[str], as_user: list[str]) -> None:
    result = subprocess.run(as_user + cmd, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        output = result.stderr.strip() or result.stdout.strip()
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {output}")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL test server unavailable under CI: {reason}")
    pytest.skip(f"PostgreSQL test server unavailable: {reason}")


def _start(bindir: Path, root: Path, as_user: list[str]) -> int:
    """initdb and start a server on a free port; returns the port."""
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if as_user:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    _run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
          "--no-sync"], as_user)
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        # Test data needs no durability: fsync off makes commits cheap.
        options = f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        try:
            _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60",
                  "-o", options, "start"], as_user)
            return port
        except RuntimeError:
            continue
    log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
    raise RuntimeError(f"PostgreSQL did not start: {log[-2000:]}")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    bindir = pg_bindir()
    if bindir is None:
        _unavailable("no initdb/pg_ctl (Debian: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401  (the driver the URL names)
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install -e '.[postgres]')")
    as_user = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            _unavailable("running as root needs runuser to start the server as the postgres user")
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root needs a 'postgres' user (Debian's postgresql package creates it)")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    try:
        port = _start(bindir, root, as_user)
        _run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", DATABASE], [])
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{DATABASE}"
    finally:
        if (root / "data" / "postmaster.pid").exists():  # a server runs (or died): stop it
            subprocess.run(as_user + [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w",
                                      "stop"], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
