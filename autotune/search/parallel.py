"""A search's intra-op studies two at a time in forked worker processes (same answers).

Every study a search runs is known before its first slice is solved (the slices' lower bounds
read every data-parallel degree's studies), and each is seeded and independent of the others:
they can run in any order and in any process, and give the same results bit for bit. On a
large problem most of the time is in them (GPT-3 175B on 1024 GPUs: 65 studies, about 60% of
the search), so two cores take about half of it off.

Forked workers (nothing re-imported) only where forking is safe and pays: a POSIX ``fork``
start method, two usable cores, no other thread in this process, not inside a daemonic
(pool) process, and at least :data:`MIN_STUDIES` studies to run. ``AUTOTUNE_PROCESSES=1``
turns it off. A study that fails in a worker is left to the caller, which runs it itself (and
raises what it raises).
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["MIN_STUDIES", "run_studies", "processes"]

# Fewer studies than this run in the search's own process: two forks and the transfers cost
# about what the second core saves there (`large` on 16 GPUs runs 15 studies in ~0.3 s).
MIN_STUDIES = 24

_SEARCH = None  # the SliceSearch the forked workers read (inherited by fork, never pickled)


def processes() -> int:
    """Worker processes to use: 2 where two cores are usable, else 1 (``AUTOTUNE_PROCESSES``)."""
    text = os.environ.get("AUTOTUNE_PROCESSES")
    if text is not None:
        return max(1, min(2, int(text))) if text.strip().isdigit() else 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(2, cores)


def _can_fork() -> bool:
    import multiprocessing as mp  # here: most searches run too few studies to need it

    return ("fork" in mp.get_all_start_methods() and threading.active_count() == 1
            and not mp.current_process().daemon)


def _quiet_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the search's process handles interrupts and ends the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _study(key: tuple[int, int]):
    try:
        return key, _SEARCH._run_study(*key), True
    except Exception:  # noqa: BLE001  (the caller runs it again itself and raises)
        return key, None, False


def run_studies(search, keys: list[tuple[int, int]]) -> dict:
    """``search._run_study(dp, model_parallel)`` of each key, run in two forked workers; {} when
    that is not possible or not worth it, and without the keys whose study failed."""
    global _SEARCH
    if len(keys) < MIN_STUDIES or processes() < 2 or not _can_fork():
        return {}
    import multiprocessing as mp

    _SEARCH = search
    out = {}
    try:
        with mp.get_context("fork").Pool(2, initializer=_quiet_worker) as pool:
            for key, result, ok in pool.imap_unordered(_study, keys, chunksize=1):
                if ok:
                    out[key] = result
    finally:
        _SEARCH = None
    return out
