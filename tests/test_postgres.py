"""Shared searches on a real PostgreSQL server (tests/pg_fixture.py).

``test_killed_worker_loses_no_finished_trial``: Optuna's heartbeat machinery alone, a trivial
objective (tests/pg_study_worker.py), three workers, one killed with SIGKILL mid-trial.

``test_search_with_workers_survives_a_killed_worker``: the real CLI, ``autotune search --storage``
(which works on the queue too) plus three ``autotune worker`` processes; one worker is killed with
SIGKILL while it holds a slice. The heartbeat interval and grace period are shortened for these
processes through ``AUTOTUNE_HEARTBEAT_S=1`` and ``AUTOTUNE_GRACE_S=5`` (autotune/search/store.py;
the defaults are 5 s and 20 s), so the killed worker's slice is failed and retried within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
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


# >= 20 slices (32: dp x micro-batch); the first slice of each dp a process takes runs intra-op studies
SEARCH_ARGS = ["--model", "gpt3-1.3b", "--gpus", "64", "--cluster", "dgx-a100-80gb", "--global-batch", "256"]
FAST_HEARTBEAT = {"AUTOTUNE_HEARTBEAT_S": "1", "AUTOTUNE_GRACE_S": "5"}


def _autotune(args: list[str], workdir: Path, name: str) -> subprocess.Popen:
    """``python -m autotune ARGS`` with short heartbeats; stdout to ``name.out``, stderr to output-NAME.log."""
    with (workdir / f"{name}.out").open("w") as out, (workdir / f"output-{name}.log").open("w") as err:
        return subprocess.Popen([sys.executable, "-m", "autotune", *args], stdout=out, stderr=err,
                                env={**os.environ, **FAST_HEARTBEAT})


def _held_by(study, tag: str):
    """The RUNNING slice trial of the process ``tag`` (host:pid, the trial's "worker" attribute)."""
    from optuna.trial import TrialState

    return next((t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                 if t.user_attrs.get("worker") == tag), None)


def _kill_while_holding_a_slice(study, url: str, victim: subprocess.Popen, workdir: Path) -> int:
    """SIGKILL ``victim`` while it holds a RUNNING slice trial whose heartbeat is recorded; returns
    the trial's number. The victim is stopped (SIGSTOP) for the check, so it cannot finish the trial
    between the check and the kill; if the check fails it continues and we look again."""
    tag = f"{socket.gethostname()}:{victim.pid}"
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        if victim.poll() is not None:
            pytest.fail(f"the victim exited ({victim.returncode}) before it held a slice: {_outputs(workdir)}")
        if _held_by(study, tag) is not None:
            os.kill(victim.pid, signal.SIGSTOP)
            time.sleep(0.2)  # a commit the victim sent just before the stop lands
            held = _held_by(study, tag)
            if held is not None and _has_heartbeat(url, held._trial_id):
                victim.kill()
                victim.wait(timeout=30)
                return held.number
            os.kill(victim.pid, signal.SIGCONT)
        time.sleep(0.02)
    pytest.fail(f"the victim never held a slice: {_outputs(workdir)}")


def _finish(proc: subprocess.Popen, name: str, workdir: Path) -> dict:
    """Wait for an autotune process; it must exit 0 with JSON on stdout."""
    try:
        proc.wait(timeout=WAIT_LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, _outputs(workdir)
    return json.loads((workdir / f"{name}.out").read_text())


def _run_shared_search(url: str, study_name: str, workdir: Path):
    """The coordinator and three workers; the first worker is killed while it holds a slice.
    Returns (the coordinator's JSON, the workers' JSON, the killed trial, COMPLETE trials at the kill)."""
    import optuna

    coordinator = _autotune(["search", *SEARCH_ARGS, "--storage", url, "--study", study_name, "--json", "--quiet"],
                            workdir, "coordinator")
    procs = [coordinator]
    try:
        queued = lambda: "queued" in (workdir / "output-coordinator.log").read_text()  # noqa: E731
        _wait_for(queued, procs, "the coordinator to queue the slices", workdir)
        procs += [_autotune(["worker", "--study", study_name, "--storage", url, "--json"], workdir, f"worker-{i}")
                  for i in range(3)]
        study = optuna.load_study(study_name=study_name, storage=url)
        killed = _kill_while_holding_a_slice(study, url, procs[1], workdir)
        done_at_kill = {t.number: t.value for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
        result = _finish(coordinator, "coordinator", workdir)
        workers = {procs[i].pid: _finish(procs[i], f"worker-{i - 1}", workdir) for i in (2, 3)}
        return study, result, workers, killed, done_at_kill
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_search_with_workers_survives_a_killed_worker(postgres_url, tmp_path):
    from optuna.trial import TrialState

    from autotune.search.store import finished_slices
    from autotune.search.api import search

    study, result, workers, killed, done_at_kill = _run_shared_search(postgres_url, "cli-kill", tmp_path)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[killed].state == TrialState.FAIL
    assert [n for n, t in trials.items() if t.state == TrialState.FAIL] == [killed]
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed]
    queued = trials[killed].system_attrs["fixed_params"]  # its params may be partial: killed while suggesting them
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE and retries[0].params == queued
    assert retries[0].user_attrs["worker"] != trials[killed].user_attrs["worker"]  # finished by another process
    slices = [(t.params["dp"], t.params["micro_batch"]) for t in trials.values()
              if "dp" in t.params and t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(slices) == len(set(slices)) == len(finished_slices(study)) == result["stats"]["num_slices"] >= 20
    assert {n: trials[n].value for n in done_at_kill} == done_at_kill  # no finished trial was lost or redone
    for pid, report in workers.items():  # each worker's count is what the study holds under its name
        mine = [t for t in trials.values() if t.user_attrs.get("worker") == f"{socket.gethostname()}:{pid}"
                and t.state == TrialState.COMPLETE]
        assert report["slices_solved"] == len(mine)
    assert all((tmp_path / f"output-worker-{i}.log").read_text() == "" for i in (1, 2))  # no warnings either
    assert (tmp_path / "output-coordinator.log").read_text().count("\n") == 2  # only where workers can join
    local = search("gpt3-1.3b", 64, cluster="dgx-a100-80gb", global_batch=256, cache=False)
    assert result["estimate"]["step_time_s"] == pytest.approx(local.estimate.step_time_s, rel=1e-12)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=120)


def test_bad_storage_or_study_is_one_line_exit_2(postgres_url):
    import optuna

    optuna.create_study(study_name="another-problem", storage=postgres_url).set_user_attr("problem", {"gpus": 1})
    cases = [(["worker", "--study", "s", "--storage", "postgresql+psycopg://u@127.0.0.1:1/x"], "storage"),
             (["worker", "--study", "no-such-study", "--storage", postgres_url], "no study 'no-such-study'"),
             (["search", "--model", "small", "--gpus", "2", "--storage", postgres_url, "--study", "another-problem"],
              "made for another problem")]
    for args, expected in cases:
        proc = _cli(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_heartbeat_settings_from_the_environment(monkeypatch):
    from autotune.errors import AutotuneError
    from autotune.search.store import GRACE_S, HEARTBEAT_S, heartbeat_settings

    monkeypatch.delenv("AUTOTUNE_HEARTBEAT_S", raising=False)
    monkeypatch.delenv("AUTOTUNE_GRACE_S", raising=False)
    assert heartbeat_settings() == (HEARTBEAT_S, GRACE_S)
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "2")
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "7")
    assert heartbeat_settings() == (2, 7)
    for interval, grace, field in [("0", "7", "AUTOTUNE_HEARTBEAT_S"), ("1.5", "7", "AUTOTUNE_HEARTBEAT_S"),
                                   ("2", "x", "AUTOTUNE_GRACE_S"), ("5", "5", "AUTOTUNE_GRACE_S")]:
        monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", interval)
        monkeypatch.setenv("AUTOTUNE_GRACE_S", grace)
        with pytest.raises(AutotuneError) as err:
            heartbeat_settings()
        assert err.value.field == field
