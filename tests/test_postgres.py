"""A shared Optuna study on a real PostgreSQL server: three worker processes, one killed with
SIGKILL mid-trial; its trial is failed by the heartbeat and retried, and no finished trial is lost
or counted twice. (The template of the ``autotune worker`` test.)"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("pg_study_worker.py")
WAIT_LIMIT_S = 90.0  # a generous bound for a stalled run, not a speed requirement

pytestmark = pytest.mark.slow


def _spawn(url: str, role: str, workdir: Path, index: int) -> subprocess.Popen:
    """A worker process; its output goes to a file (a full pipe would block it)."""
    with (workdir / f"output-{role}-{index}.log").open("w") as log:
        return subprocess.Popen([sys.executable, str(WORKER), url, "pg-kill", role, str(workdir)],
                                stdout=log, stderr=subprocess.STDOUT)


def _outputs(workdir: Path) -> str:
    return "\n".join(f"{log.name}: {log.read_text()[-1000:]}" for log in sorted(workdir.glob("output-*.log")))


def _wait_for(condition: Callable[[], bool], procs: list[subprocess.Popen], what: str, workdir: Path) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"a worker exited ({proc.returncode}) while waiting for {what}: {_outputs(workdir)}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}: {_outputs(workdir)}")
        time.sleep(0.1)


def _finished(workdir: Path) -> list[tuple[int, int]]:
    rows = []
    for log in workdir.glob("finished-*.log"):
        rows += [tuple(int(x) for x in line.split()) for line in log.read_text().splitlines()]
    return rows


def _has_heartbeat(url: str, trial_id: int) -> bool:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            query = sqlalchemy.text("SELECT count(*) FROM trial_heartbeats WHERE trial_id = :id")
            return conn.execute(query, {"id": trial_id}).scalar() > 0
    finally:
        engine.dispose()


def _run_and_kill(url: str, study, workdir: Path) -> int:
    """Start two workers and a victim, kill the victim mid-trial, stop when its retry completed."""
    workers = [_spawn(url, "worker", workdir, i) for i in range(2)]
    victim = _spawn(url, "victim", workdir, 0)
    try:
        marker = workdir / "victim-trial"
        _wait_for(lambda: marker.exists() and len(_finished(workdir)) >= 2, workers + [victim], "the victim's trial",
                  workdir)
        number = int(marker.read_text())
        trial_id = next(t._trial_id for t in study.get_trials(deepcopy=False) if t.number == number)
        _wait_for(lambda: _has_heartbeat(url, trial_id), workers + [victim], "the victim's heartbeat", workdir)
        victim.kill()  # SIGKILL: no cleanup, the trial stays RUNNING until its heartbeat goes stale
        victim.wait(timeout=30)
        retried = lambda: any(t.system_attrs.get("failed_trial") == number and t.state.name == "COMPLETE"  # noqa: E731
                              for t in study.get_trials(deepcopy=False))
        _wait_for(retried, workers, "the retry of the killed trial", workdir)
        (workdir / "stop").touch()
        for proc in workers:
            proc.wait(timeout=60)
            assert proc.returncode == 0, _outputs(workdir)
        return number
    finally:
        for proc in workers + [victim]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_killed_worker_loses_no_finished_trial(postgres_url, tmp_path):
    import optuna

    from pg_study_worker import storage

    study = optuna.create_study(study_name="pg-kill", storage=storage(postgres_url), direction="maximize")
    killed = _run_and_kill(postgres_url, study, tmp_path)
    trials = {t.number: t for t in study.get_trials()}
    states = {n: t.state.name for n, t in trials.items()}
    assert states[killed] == "FAIL"
    assert [n for n, s in states.items() if s != "COMPLETE"] == [killed]
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].params == trials[killed].params
    finished = _finished(tmp_path)
    numbers = [n for n, _ in finished]
    assert len(numbers) == len(set(numbers)), "a trial ran to the end twice"
    assert {n: float(x) for n, x in finished} == {n: t.value for n, t in trials.items() if t.state.name == "COMPLETE"}
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retry_history(retries[0]) == [killed]
