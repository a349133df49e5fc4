"""A search's intra-op studies two at a time in forked worker processes (same answers).

Every study a search runs is known before its first slice is solved (the slices' lower bounds
read every data-parallel degree's studies), and each is seeded and independent of the others:
they can run in any order and in any process, and give the same results bit for bit. On a
large problem most of the time is in them (GPT-3 175B on 1024 GPUs: 65 studies, about 60% of
the search), so two cores take about half of it off.

Forked workers (nothing re-imported) only where forking is safe and pays: Linux's ``fork``
start method, two usable cores, no other thread in this process, not inside a daemonic
(pool) process, and at least :data:`MIN_STUDIES` studies to run. ``AUTOTUNE_PROCESSES=1`` turns it off. A study that fails in a worker is left to the
caller, which runs it itself (and raises what it raises).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import types

__all__ = ["MIN_STUDIES", "MIN_TABLES", "run_studies", "price_tables", "processes", "usable"]

# Fewer studies than MIN_STUDIES run in the search's own process: the forks, the transfers and
# Optuna's import cost about what a second core saves (`large` on 16 GPUs, 15 studies in ~0.3 s:
# 0.75 s instead of 0.91 s at load 1.9 but 1.24-1.36 s instead of 1.16 s at load 3-4; with workers
# from 8 studies scripts/bench_space.py's largest case ran 14.9x faster than exhaustive, without
# them 23.0x, on a quiet machine). From 24
# (GPT-3 175B on 1024 GPUs: 65) they pay at any load. Whether a search forks depends on the
# problem only, not on the machine's load.
MIN_STUDIES = 24

# A search's first tables are its classes' bare stages, about 1.5 ms each (one cost-model call;
# DeepSeek-V3 on 2048 GPUs: 294 in 0.46 s of CPU), sent with the baselines' few tenths of a
# second: forking and sending them back (about 0.05-0.15 s) pays from about this many (large on
# 16 GPUs: about 20, made here). Later rounds: autotune.search.uniform MIN_ROUND_TABLES.
MIN_TABLES = 128

_SEARCH = None  # the SliceSearch the forked workers read (inherited by fork, never pickled)


def _read_only(mapping: dict) -> types.MappingProxyType:
    return types.MappingProxyType(mapping)


def _mappingproxy(proxy: types.MappingProxyType):
    return _read_only, (dict(proxy),)


def _register_mappingproxy() -> None:
    """An Estimate's breakdowns are read-only mappings, which pickle cannot send: a worker that
    scores the baselines (autotune.search.screens) sends each as its dict, read-only again on
    arrival (multiprocessing's own pickler only: pickle itself is left as it is). Registered
    before the first pool forks (multiprocessing loads only for a search that forks)."""
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(types.MappingProxyType, _mappingproxy)


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


def usable() -> bool:
    """Whether worker processes would be forked here (two usable cores, fork safe)."""
    return processes() >= 2 and _can_fork()


def _can_fork() -> bool:
    import multiprocessing as mp  # here: most searches run too few studies to need it

    # Linux only: macOS offers fork but its system libraries are not fork-safe (spawn is its default)
    return (sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()
            and threading.active_count() == 1 and not mp.current_process().daemon)


def _quiet_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the search's process handles interrupts and ends the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:  # end with the search's process, however it ends (an interrupted CLI leaves by os._exit)
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (linux/prctl.h)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(0)


def _study(key: tuple[int, int]):
    try:
        return key, _SEARCH._run_study(*key), True
    except BaseException:  # noqa: BLE001  (an interrupt too: the caller runs it again itself and raises)
        return key, None, False


def _tables(key: tuple):
    try:  # a price task of autotune.search.screens (bare stage, time screen position tables, leanest member memory)
        return key, _SEARCH.uniform.screens.compute(key), True
    except BaseException:  # noqa: BLE001  (as _study)
        return key, None, False


def run_studies(search, keys: list[tuple[int, int]]) -> dict:
    """``search._run_study(dp, model_parallel)`` of each key, run in two forked workers; {} when
    that is not possible or not worth it, and without the keys whose study failed or whose
    worker died (the caller runs those itself)."""
    if len(keys) < MIN_STUDIES or processes() < 2 or not _can_fork():
        return {}
    from autotune.search.intra_op import load_optuna

    load_optuna()  # once here rather than once in each worker
    return _run(search, _study, keys)


def price_tables(search, keys: list[tuple], least: int | None = None) -> dict:
    """Stage tables of a uniform-stage search (autotune.search.screens Screens.compute of each
    key) made in two forked workers, as run_studies; {} when not possible or not worth it (fewer
    than ``least`` keys; None: MIN_TABLES)."""
    if len(keys) < (MIN_TABLES if least is None else least) or processes() < 2 or not _can_fork():
        return {}
    return _run(search, _tables, keys)


def _run(search, task, keys: list) -> dict:
    """``task(key)`` of every key in forked children that take the next key as they finish one
    (a counter in shared memory), each sending its answers back once, when none is left: no
    executor, manager thread or queue in this process, and no message per task (a uniform
    search's rounds have hundreds of tasks of a few milliseconds). This process only waits; the
    answers come back in the order of ``keys``."""
    global _SEARCH
    import multiprocessing as mp

    _register_mappingproxy()  # before the fork: the children inherit it
    _SEARCH = search
    claimed = mp.get_context("fork").Value("q", 0)  # the next key's index, shared by the children
    children: dict[int, int] = {}  # pid -> read end of its pipe
    parent = os.getpid()
    try:
        for _ in range(processes()):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller's code
                os.close(read)
                _child(task, keys, claimed, write, parent)
            os.close(write)
            children[pid] = read
        answers = _collect(children)
    except BaseException:  # an interrupt: the children end now
        for pid in children:
            _end(pid)
        raise
    finally:
        for read in children.values():
            os.close(read)
        _SEARCH = None
    return {keys[i]: result for i, result in sorted(answers.items())}


def _child(task, keys: list, claimed, write: int, parent: int) -> None:
    """Take keys until none is left, then send {index: result} of those that succeeded."""
    code = 1
    try:
        _quiet_worker(parent)
        from multiprocessing.reduction import ForkingPickler

        done = {}
        while True:
            with claimed.get_lock():
                i = claimed.value
                claimed.value = i + 1
            if i >= len(keys):
                break
            _, result, ok = task(keys[i])
            if ok:
                done[i] = result
        data = memoryview(ForkingPickler.dumps(done))
        while data:
            data = data[os.write(write, data):]
        code = 0
    finally:
        os._exit(code)


def _collect(children: dict[int, int]) -> dict:
    """Every child's answers, read as they come (a child blocks once its pipe is full); a child
    that died or sent an incomplete message leaves its keys out."""
    import pickle
    import selectors

    chunks: dict[int, list[bytes]] = {read: [] for read in children.values()}
    with selectors.DefaultSelector() as selector:
        for read in chunks:
            selector.register(read, selectors.EVENT_READ)
        while selector.get_map():
            for ready, _ in selector.select():
                chunk = os.read(ready.fd, 1 << 20)
                if chunk:
                    chunks[ready.fd].append(chunk)
                else:
                    selector.unregister(ready.fd)
    answers = {}
    for pid, read in children.items():
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            try:
                answers.update(pickle.loads(b"".join(chunks[read])))
            except Exception:  # noqa: BLE001  (a message cut short: its keys are left to the caller)
                continue
    return answers


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
