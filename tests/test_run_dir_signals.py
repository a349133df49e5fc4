"""make_run_dir holds SIGINT and SIGTERM while it makes a folder and records it (run_dir._signals_held): a
signal sent inside the block reaches its handler after it, also when another thread could take the signal
(OpenBLAS's pool does once numpy loads; scripts/diag_signals_held.py), and every handler is put back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from autotune.outputs.run_dir import _signals_held


@pytest.fixture
def other_thread():
    """A thread that blocks no signal, as a native pool's: the kernel may hand it a signal the main one blocks."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.fixture
def handlers():
    """What the test sets, put back after it."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_an_interrupt_inside_the_block_lands_after_it(other_thread, handlers):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stages = []
    with pytest.raises(KeyboardInterrupt):
        with _signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(0.2)  # room for the other thread to take it (a slow mkdir)
            stages.append("inside")
        stages.append("after")
    assert stages == ["inside"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_reaches_its_own_handler_once_and_every_handler_is_put_back(other_thread, handlers):
    got = []

    def record(signum, _frame):
        got.append(signum)

    signal.signal(signal.SIGTERM, record)
    with _signals_held():
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(0.2)
        assert got == []
    assert got == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is record
    with _signals_held():
        pass
    assert got == [signal.SIGTERM]  # nothing sent: nothing delivered
