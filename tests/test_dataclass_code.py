"""The command line's cache of dataclass methods (autotune.cli.dataclass_code): a class made from
the cache is the class Python makes, the cache survives between processes, and a bad or
unwritable cache file only costs the compiling it would have saved."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

from autotune.cli import dataclass_code

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


def _make():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Point:
        x: int
        y: float = 0.5
        tags: tuple[str, ...] = ()
    return Point


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "pycache" / "dataclass_code.marshal"
    monkeypatch.setattr(dataclass_code, "cache_path", lambda: str(path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    dataclass_code.uninstall()
    yield path
    dataclass_code.uninstall()


def _same_class(a, b) -> None:
    for name in METHODS:
        assert getattr(a, name).__code__ == getattr(b, name).__code__, name
    p, q = a(x=1, tags=("t",)), b(x=1, tags=("t",))
    assert repr(p) == repr(q) and hash(p) == hash(q) and p == a(x=1, tags=("t",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2


def test_a_class_made_from_the_cache_is_the_class_python_makes(cache_file):
    plain = _make()
    dataclass_code.install()
    compiled = _make()  # compiled here, kept in memory
    _same_class(plain, compiled)
    assert not cache_file.exists()
    dataclass_code.save()
    assert cache_file.stat().st_size > 0
    dataclass_code.uninstall()
    dataclass_code.install()  # as the next process would: read from the file
    assert not dataclass_code._new and dataclass_code._cached
    cached = _make()
    assert not dataclass_code._new  # nothing compiled
    _same_class(plain, cached)


def test_uninstall_gives_dataclasses_back(cache_file):
    dataclass_code.install()
    assert "exec" in vars(dataclasses)
    dataclass_code.uninstall()
    assert "exec" not in vars(dataclasses)
    _same_class(_make(), _make())


@pytest.mark.parametrize("content", [b"", b"not marshal data", b"\xe9\x00\x00\x00"])
def test_a_bad_cache_file_is_an_empty_cache(cache_file, content):
    cache_file.parent.mkdir()
    cache_file.write_bytes(content)
    dataclass_code.install()
    _same_class(_make(), _make())
    assert dataclass_code._new  # compiled as without a cache
    dataclass_code.save()
    dataclass_code.uninstall()
    dataclass_code.install()
    assert dataclass_code._cached  # the file was rewritten whole


def test_nothing_is_written_where_python_writes_no_bytecode(cache_file, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    dataclass_code.install()
    _make()
    dataclass_code.save()
    assert not cache_file.exists()


def test_an_unwritable_place_leaves_no_file(cache_file):
    cache_file.parent.write_text("a file where the folder would go")
    dataclass_code.install()
    _make()
    dataclass_code.save()  # no error: the next run compiles again
    assert cache_file.parent.is_file()


def test_the_command_line_keeps_its_cache_beside_its_bytecode(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(tmp_path / "prefix"))
    run = [sys.executable, "-m", "autotune", "search", "--model", "large", "--gpus", "16", "--no-run-dir", "--json"]
    first = subprocess.run(run, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    files = list((tmp_path / "prefix").rglob("dataclass_code.*.marshal"))
    assert len(files) == 1
    written = files[0].stat().st_mtime_ns
    second = subprocess.run(run, capture_output=True, text=True, env=env)
    assert second.returncode == 0, second.stderr
    plan = [json.loads(out.stdout)["plan"] for out in (first, second)]
    assert plan[0] == plan[1]
    assert files[0].stat().st_mtime_ns == written  # every method came from the cache: nothing new to write
