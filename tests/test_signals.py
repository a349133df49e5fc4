"""SIGINT and SIGTERM at several moments of a running search: exit 130, one line on stderr, no
traceback, and every slice stored before the signal is still in the study (and resumes).

The moments are found, not timed: "handlers installed" from the process's caught-signal mask
(/proc/PID/status), "run directory made" and "first slice stored" from the files themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.outputs.run_dir import study_db_summary

# exclusive: under pytest-xdist no other test runs meanwhile (tests/conftest.py), so the moments
# the signals land at are those of a search with the machine to itself, as in a serial run.
pytestmark = [pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)"),
              pytest.mark.exclusive]

ROOT = Path(__file__).resolve().parent.parent
# the default space: its Optuna studies store 34 slices over a few seconds, so each moment these
# tests aim at (inside the first studies, between stored slices) still comes before the end; the
# runtime's own space is solved by bounds in a fraction of a second
SEARCH = ["search", "--model", "gpt3-13b", "--gpus", "64", "--space", "default", "--quiet", "--plots", "none"]


def _start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "autotune", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(condition, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"the process ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, "the moment never came"
        time.sleep(0.01)


def _handles(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (its SigCgt mask in /proc)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in text.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


def _run_dirs(runs: Path) -> list[Path]:
    return sorted(runs.iterdir()) if runs.exists() else []


def _finished(run: Path) -> int:
    summary = study_db_summary(run / "study.db") or []
    return sum(n for _, n in summary)


def _interrupted(proc: subprocess.Popen, signum: int) -> str:
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    return _check_interrupted(proc, err)


def _check_interrupted(proc: subprocess.Popen, err: str) -> str:
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "Error" not in err, err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err, err
    return err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_as_soon_as_handled(tmp_path, signum):
    """While the commands are still being imported: exit 130, one line, nothing written."""
    proc = _start(SEARCH, tmp_path)
    _wait_for(lambda: _handles(proc.pid, signal.SIGTERM), proc)
    _interrupted(proc, signum)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_before_the_first_slice_is_stored(tmp_path, signum):
    """Inside the first intra-op studies (Optuna's own trial bookkeeping): still one line, and
    a run directory with no finished slice is removed, runs/ with it."""
    proc = _start(SEARCH, tmp_path)
    _wait_for(lambda: any((r / "study.db").exists() for r in _run_dirs(tmp_path / "runs")), proc)
    time.sleep(0.3)  # into the studies of the first slices
    stored = [_finished(r) for r in _run_dirs(tmp_path / "runs")]
    err = _interrupted(proc, signum)
    runs = _run_dirs(tmp_path / "runs")
    if stored == [0] and not runs:
        assert not (tmp_path / "runs").exists() and "kept" not in err
    else:  # a slice was stored meanwhile: it is kept (the resume hint is asserted where slices are
        # known to be stored when the signal lands; here the search may already be writing its outputs)
        assert len(runs) == 1 and _finished(runs[0]) >= max(stored)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_after_slices_are_stored_keeps_them_and_resumes(tmp_path, signum):
    proc = _start(SEARCH, tmp_path)
    _wait_for(lambda: any(_finished(r) >= 1 for r in _run_dirs(tmp_path / "runs")), proc)
    (run,) = _run_dirs(tmp_path / "runs")
    seen = _finished(run)
    err = _interrupted(proc, signum)
    assert f"--resume {Path('runs') / run.name}" in err
    assert _finished(run) >= seen  # nothing stored was lost
    resumed = subprocess.run([sys.executable, "-m", "autotune", "search", "--resume", str(run), "--json", "--quiet",
                              "--plots", "none"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    import json

    assert json.loads(resumed.stdout)["stats"]["num_slices_resumed"] >= seen


@pytest.mark.slow
@pytest.mark.parametrize("signum, delay_s", [(signal.SIGTERM, 0.05), (signal.SIGINT, 0.8), (signal.SIGTERM, 1.7),
                                             (signal.SIGINT, 3.1)])
def test_signal_at_other_moments_never_loses_a_stored_slice(tmp_path, signum, delay_s):
    """Moments after the run directory appears: whatever the search was doing, exit 130 (or 0 if
    it had finished), one line, and the slices stored before the signal are all still there."""
    proc = _start(SEARCH, tmp_path)
    _wait_for(lambda: bool(_run_dirs(tmp_path / "runs")), proc)
    time.sleep(delay_s)
    (run,) = _run_dirs(tmp_path / "runs") or [None]
    seen = _finished(run) if run is not None else 0
    if proc.poll() is not None:  # finished before the signal
        assert proc.returncode == 0
        return
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # the signal came after the search had finished: its result is whole
        assert "step time" in out and (run / "plan.json").exists() and not err.strip(), (out, err)
        return
    err = _check_interrupted(proc, err)
    if run is not None and run.exists():
        assert _finished(run) >= max(seen, 1)  # a directory is kept only for stored slices, and none is lost
        assert "--resume" in err or (run / "plan.json").exists()
    else:
        assert seen == 0


def test_a_signal_after_the_command_finished_cannot_kill_its_shutdown():
    """Interpreter shutdown puts back the default actions of SIGINT/SIGTERM; after signals.finish
    a signal landing then is held, not fatal: the finished command still exits with its code."""
    code = ("import os, signal, sys\n"
            "from autotune.cli import signals\n"
            "signals.install()\n"
            "code = signals.finish(0)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as shutdown does\n"
            "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr)
