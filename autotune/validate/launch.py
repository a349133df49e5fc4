"""Start one worker process per rank, wait with a deadline, and leave none behind.

Each worker is a fresh interpreter (``python -m autotune.validate.worker``: no forked torch
threads, and no need for a ``__main__`` guard in the caller) in its own process group, and
the ranks rendezvous over TCP on a free local port. If one exits with an error the others
get a short grace period to fail on their own and are then killed; past the deadline all
are killed, with anything they started (the whole process group). Each worker also asks the
kernel to kill it if this process dies (worker.py).
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from autotune.validate.job import RankResult, RunConfig
from autotune.validate.worker import CONFIG_FILE, log_path, result_path

__all__ = ["LaunchOutcome", "launch", "free_port"]

# After one rank fails, the others usually fail within a collective's round trip.
GRACE_S = 5.0
POLL_S = 0.05


@dataclass(frozen=True, kw_only=True)
class LaunchOutcome:
    """``status``: "ok", "failed" (a rank raised or died) or "timeout". ``external_load_cores``:
    CPU that other processes (and the hypervisor's steal) took while the workers ran, in cores."""

    status: str
    message: str
    ranks: tuple[RankResult, ...]
    wall_s: float
    external_load_cores: float = 0.0


def _cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine incl. steal, CPU seconds of this process and its
    reaped children) so far; busy is 0 where /proc/stat is missing."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    mine = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    try:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0, mine
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), mine


def _external_load(before: tuple[float, float], after: tuple[float, float], wall_s: float) -> float:
    """Cores' worth of CPU used by anything but this run (other processes, steal) during it."""
    if not before[0] or wall_s <= 0:
        return 0.0
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / wall_s)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminate, then kill, every worker's process group."""
    for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def _wait(procs: list[subprocess.Popen], timeout_s: float) -> str:
    """'ok', 'failed' or 'timeout', once every process has ended or been given up on."""
    deadline = time.monotonic() + timeout_s
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now > deadline or (failed_at is not None and now - failed_at > GRACE_S):
            break
        time.sleep(POLL_S)
    if any(p.returncode not in (None, 0) for p in procs) or failed_at is not None:
        return "failed"
    return "timeout" if any(p.poll() is None for p in procs) else "ok"


def _read_results(folder: Path, procs: list[subprocess.Popen]) -> tuple[list[RankResult], str]:
    """Every rank's result, and its problems: the first rank to fail first (the others
    usually fail because it did), then ranks that died without a word (their log's last line)."""
    results, silent = [], []
    for rank, proc in enumerate(procs):
        path = result_path(folder, rank)
        if path.exists():
            results.append(RankResult.from_dict(json.loads(path.read_text())))
        else:
            tail = _log_tail(log_path(folder, rank))
            silent.append(f"rank {rank} exited with code {proc.returncode} and no result" + (f": {tail}" if tail else ""))
    failed = sorted((r for r in results if r.error), key=lambda r: r.extra.get("failed_at", 0.0))
    return results, "; ".join([f"rank {r.rank}: {r.error}" for r in failed] + silent)


def _log_tail(path: Path) -> str:
    """The last line of a worker's log that names an error (else its last line)."""
    if not path.exists():
        return ""
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    named = [line for line in lines if "rror" in line or "what()" in line or "Killed" in line]
    return (named or lines or [""])[-1][:300]


def _start(folder: Path, world_size: int, port: int) -> list[subprocess.Popen]:
    procs = []
    for rank in range(world_size):
        with open(log_path(folder, rank), "ab") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "autotune.validate.worker", str(folder), str(rank), str(port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def launch(config: RunConfig, *, timeout_s: float) -> LaunchOutcome:
    """Run ``config`` on ``config.world_size`` local processes; never leaves one running."""
    started, cpu_before = time.monotonic(), _cpu_seconds()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="autotune-validate-") as tmp:
        folder = Path(tmp)
        (folder / CONFIG_FILE).write_bytes(pickle.dumps(config))
        try:
            procs = _start(folder, config.world_size, free_port())
            status = _wait(procs, timeout_s)
        finally:
            _stop(procs)
        results, problems = _read_results(folder, procs)
    wall_s = time.monotonic() - started
    external = _external_load(cpu_before, _cpu_seconds(), wall_s)
    if status == "timeout":
        done = sorted(r.rank for r in results)
        problems = f"no result after {timeout_s:.0f} s (ranks finished: {done or 'none'})" + (
            f"; {problems}" if problems else "")
    elif status == "ok" and (problems or len(results) < config.world_size):
        status, problems = "failed", problems or "a rank ended without a result"
    elif status == "failed" and not problems:
        problems = "; ".join(f"rank {rank} exited with code {proc.returncode} after writing its result"
                             for rank, proc in enumerate(procs) if proc.returncode not in (None, 0))
    return LaunchOutcome(status=status, message=problems, ranks=tuple(results), wall_s=wall_s,
                         external_load_cores=external)
