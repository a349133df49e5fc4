"""One signal path: SIGINT and SIGTERM, at any moment, end the command with exit 130 and one line.

The first signal raises KeyboardInterrupt where the program is, so ``finally`` blocks and the
search's own clean-up run and every committed slice stays in its study. It also records that a
signal came: an exception raised while unwinding (Optuna can turn the interrupt into an
UnboundLocalError inside its trial bookkeeping) still means "interrupted", not a crash. Log
records and "exception ignored" reports that libraries print while unwinding are silenced: the
user asked to stop, not for their tracebacks. A second signal exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

__all__ = ["install", "received", "finish", "leave", "EXIT_INTERRUPTED"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
_received: list[int] = []


def _handler(signum: int, _frame) -> None:
    if _received:  # a second signal during clean-up: leave now, still without a traceback
        os.write(2, b"autotune: interrupted\n")
        os._exit(EXIT_INTERRUPTED)
    _received.append(signum)
    logging = sys.modules.get("logging")  # not imported at start-up (~10 ms): unloaded, nothing logs
    if logging is not None:
        logging.disable(logging.CRITICAL)
    raise KeyboardInterrupt


def _quiet_unraisable(unraisable) -> None:
    if _received or isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    sys.__unraisablehook__(unraisable)


def install() -> None:
    """Route SIGINT and SIGTERM through :func:`_handler` (main thread only; idempotent)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set there; a command run in a thread keeps Python's
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _handler)
    sys.unraisablehook = _quiet_unraisable


def received() -> bool:
    """Whether SIGINT or SIGTERM has arrived in this process."""
    return bool(_received)


def finish(code: int) -> int:
    """``code``, or, after a signal, leave at once with exit 130: interpreter shutdown (thread
    joins, atexit hooks of libraries) can meet the interrupt again, and Python then ends itself
    by SIGINT (exit -2) instead of 130. Everything finished is committed by then.

    Without a signal the command has finished: SIGINT and SIGTERM are ignored for the rest of
    the process, because interpreter shutdown puts back the default action of a signal that has a
    Python handler (CPython's signal module finalisation; it leaves SIG_IGN alone) and a signal
    landing then would kill the finished command (exit -15). Blocking it in this thread is not
    enough: the kernel hands a process signal to any thread that does not block it, such as a
    BLAS pool's native threads started at import."""
    import threading

    if not _received and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    if _received:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(EXIT_INTERRUPTED)
    return code


def leave(code: int) -> NoReturn:
    """End the finished command's process with ``code`` without tearing the interpreter down:
    freeing every module and object one by one (numpy's included) costs a search about 50 M
    instructions, 20-80 ms, after its answer is printed. Only after success (a failed command may
    leave a study's SQLite connection for the interpreter to close) and where nothing is left to
    do at shutdown: no thread but this one, no atexit hook (logging, Optuna, multiprocessing and
    weakref.finalize register theirs), no profiler or tracer (``python -m cProfile -m autotune``
    writes its report after the command returns), standard output and error flushed; otherwise
    Python's own exit, as before."""
    import atexit
    import threading

    if (code != 0 or threading.active_count() > 1 or atexit._ncallbacks() or sys.getprofile() is not None
            or sys.gettrace() is not None or threading.current_thread() is not threading.main_thread()):
        raise SystemExit(code)
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError):  # a closed pipe, say: Python's exit reports it as it always has
        raise SystemExit(code) from None
    os._exit(code)
