"""How autotune.search.parallel runs a round of tasks in forked children: every key answered once,
in the order of the keys; a failed task or a dead child leaves its keys to the caller; an
interrupted round leaves no child behind."""

from __future__ import annotations

import os
import sys
import time

import pytest

from autotune.search import parallel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked rounds run on Linux only")


@pytest.fixture(autouse=True)
def two_processes(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_PROCESSES", "2")


def _children() -> set[int]:
    """This process's child processes, exited but not reaped ones too (Linux /proc): a test's worker may
    hold other tests' children (a fixture's server), so a round is checked against those it found."""
    me = os.getpid()
    pids: set[int] = set()
    for task in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{task}/children") as handle:
                pids |= {int(pid) for pid in handle.read().split()}
        except FileNotFoundError:  # a thread that ended while listed
            continue
    return pids


def test_every_key_is_answered_in_the_order_of_the_keys():
    keys = [(i, "k") for i in range(200)][::-1]
    before = _children()

    def task(key):
        time.sleep(0.001 * (key[0] % 3))  # uneven tasks: each child takes the next key as it finishes one
        return key, (key[0] * 2, os.getpid()), True
    out = parallel._run(None, task, keys)
    assert list(out) == keys
    assert all(value == key[0] * 2 for key, (value, _) in out.items())
    pids = {pid for _, pid in out.values()}
    assert len(pids) == 2 and os.getpid() not in pids  # two children did the work, not this process
    assert _children() <= before and not pids & _children()  # both reaped


def test_a_failed_task_is_left_to_the_caller():
    out = parallel._run(None, lambda key: (key, key, key % 7 != 0), list(range(50)))
    assert sorted(out) == [k for k in range(50) if k % 7]


def test_a_child_that_dies_leaves_its_keys_to_the_caller():
    def task(key):
        if key == 3:
            os._exit(9)  # the child taking key 3 dies with the answers it had
        return key, -key, True
    before = _children()
    out = parallel._run(None, task, list(range(40)))
    assert 3 not in out and out and all(value == -key for key, value in out.items())
    assert _children() <= before


def test_an_interrupted_round_ends_its_children(monkeypatch):
    def interrupted(children):
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "_collect", interrupted)
    before = _children()
    with pytest.raises(KeyboardInterrupt):
        parallel._run(None, lambda key: (time.sleep(30), (key, key, True))[1], list(range(4)))
    assert _children() <= before
    assert parallel._SEARCH is None
