"""Where a process-directed SIGINT sent inside a held block lands: blocking it in this thread's signal mask
(pthread_sigmask) against autotune.outputs.run_dir._signals_held (handlers swapped until the block ends).

python scripts/diag_signals_held.py          (no other thread)
python scripts/diag_signals_held.py numpy    (numpy loaded: OpenBLAS's pool threads block no signal)

With numpy loaded the kernel hands the signal the main thread blocks to a pool thread, CPython's C handler
runs there, and the main thread runs the Python handler at its next check: inside the masked block."""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager

if len(sys.argv) > 1:
    import numpy  # noqa: F401  (OpenBLAS starts its thread pool at import)

from autotune.outputs.run_dir import _signals_held


@contextmanager
def _masked():
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _landed(hold) -> str:
    stage = "before"
    try:
        with hold():
            os.kill(os.getpid(), signal.SIGINT)
            stage = "inside"
            time.sleep(0.3)  # a slow mkdir (a network file system, a busy disk)
            stage = "end of block"
        stage = "after"
    except KeyboardInterrupt:
        return stage
    return "never"


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("threads:", len(os.listdir("/proc/self/task")))
    for name, hold in (("thread mask", _masked), ("_signals_held", _signals_held)):
        print(f"{name}: KeyboardInterrupt raised at stage {_landed(hold)!r}")
