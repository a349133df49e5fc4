import fcntl
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pg_fixture import postgres_url  # noqa: E402,F401  (a real PostgreSQL server, for distributed-search tests)


@pytest.fixture
def data_dir() -> Path:
    return DATA


# Parallel runs (pytest-xdist, `-n 2 --dist loadgroup`, the README's test command) ---------------
# A test that shares a module- or session-scoped fixture of this project (a finished search, the
# PostgreSQL server, the validation suite) runs on the worker that built it: the fixture is built
# once, as in a serial run. Tests marked `exclusive` (step times measured against the prediction,
# signals at chosen moments of a search) run with no other test at once: they take an exclusive
# lock, every other test a shared one, with a turnstile so that a waiting exclusive test goes next.

LOCKS = "AUTOTUNE_TEST_LOCKS"  # the controller's lock directory, inherited by the workers


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info else ()):
            fixturedef = defs[-1]
            if not fixturedef.baseid or fixturedef.scope not in ("module", "session"):
                continue  # pytest's own (tmp_path_factory) or a per-test fixture
            group = item.nodeid.split("::")[0] if fixturedef.scope == "module" else fixturedef.argname
            item.add_marker(pytest.mark.xdist_group(group))
            break


def pytest_configure(config):
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        os.environ[LOCKS] = tempfile.mkdtemp(prefix="autotune-test-locks-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get(LOCKS):
        shutil.rmtree(os.environ.pop(LOCKS), ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    locks = os.environ.get(LOCKS)
    if not locks or not hasattr(item.config, "workerinput"):
        return (yield)
    mode = fcntl.LOCK_EX if item.get_closest_marker("exclusive") else fcntl.LOCK_SH
    with open(Path(locks) / "turnstile", "a") as turnstile, open(Path(locks) / "tests", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, mode)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
