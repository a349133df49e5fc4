"""Run directories, resume after interruption, shared studies, and the CLI's error handling."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.search import api as search_api
from autotune.errors import AutotuneError


def cli(*args, cwd=None, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def finished_keys(db: Path) -> list[tuple[int, int]]:
    """(dp, micro_batch) of finished slice trials, read straight from the SQLite file."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT t.trial_id, p.param_name, p.param_value FROM trials t JOIN trial_params p "
            "ON p.trial_id = t.trial_id WHERE t.state IN ('COMPLETE', 'PRUNED')").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()
    by_trial: dict[int, dict] = {}
    for trial_id, name, value in rows:
        by_trial.setdefault(trial_id, {})[name] = int(value)
    return sorted((p["dp"], p["micro_batch"]) for p in by_trial.values())


def test_cli_search_writes_a_run_directory_and_show_explain_read_it(tmp_path):
    code, out, err = cli("search", "--model", "medium", "--gpus", "8", "--json", "--runs-dir", str(tmp_path))
    assert code == 0, err
    data = json.loads(out)
    run = Path(data["run_dir"])
    assert {"plan.json", "study.db", "report.md", "search.json"} <= {p.name for p in run.iterdir()}
    plan_file = json.loads((run / "plan.json").read_text())
    assert plan_file["schema"] == "autotune.plan/1" and plan_file["plan"] == data["plan"]
    assert len(finished_keys(run / "study.db")) == data["stats"]["num_slices"]
    code, out, _ = cli("show", str(run))
    assert code == 0 and "## Baselines" in out
    code, out, _ = cli("explain", str(run), "--json")
    assert code == 0 and json.loads(out)["estimate"]["step_time_s"] == pytest.approx(data["estimate"]["step_time_s"])


def test_interrupted_search_resumes_without_losing_finished_slices(tmp_path):
    args = [sys.executable, "-m", "autotune", "search", "--model", "gpt3-1.3b", "--gpus", "64", "--cluster",
            "dgx-a100-80gb", "--global-batch", "256", "--runs-dir", str(tmp_path), "--quiet"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db, before = None, []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list(tmp_path.iterdir())
        if runs and (runs[0] / "study.db").exists():
            db = runs[0] / "study.db"
            before = finished_keys(db)
            if before:
                break
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.skip("the search finished before it could be interrupted on this machine")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert before, "no slice finished before the kill"
    kept = finished_keys(db)
    assert set(before) <= set(kept)  # nothing finished was lost
    code, out, err = cli("search", "--resume", str(db.parent), "--json")
    assert code == 0, err
    data = json.loads(out)
    after = finished_keys(db)
    assert len(after) == len(set(after)) == data["stats"]["num_slices"]  # each slice once
    assert data["stats"]["num_slices_resumed"] == len(kept)
    fresh = search_api.search("gpt3-1.3b", 64, cluster="dgx-a100-80gb", global_batch=256)
    assert data["estimate"]["step_time_s"] == pytest.approx(fresh.estimate.step_time_s)


def test_shared_study_queue_worked_by_the_search_itself(tmp_path):
    # Concurrent workers need a database with row locks (PostgreSQL: tests/test_postgres.py);
    # here the coordinator alone works through the queue it made.
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    announced = []
    result = search_api.search("medium", 16, storage=url, study_name="shared",
                               announce=lambda name, storage: announced.append((name, storage)))
    assert announced == [("shared", url)]
    keys = finished_keys(tmp_path / "shared.db")
    assert len(keys) == len(set(keys)) == result.stats.num_slices
    assert search_api.work("shared", url) == 0  # nothing left to do
    alone = search_api.search("medium", 16)
    assert result.estimate.step_time_s == pytest.approx(alone.estimate.step_time_s)


@pytest.mark.parametrize("args, field", [
    (["--model", "large", "--gpus", "16", "--space", "nope"], "space"),
    (["--model", "large", "--gpus", "12"], "gpus"),
    (["--model", "large", "--gpus", "0"], "--gpus"),
    (["--resume", "/nonexistent/run"], "resume"),
    (["--model", "large", "--gpus", "16", "--storage", "postgresql+psycopg://u@127.0.0.1:1/x"], "storage"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, field):
    code, out, err = cli("search", *args, "--runs-dir", str(tmp_path / "runs"))
    assert code == 2 and err.count("\n") == 1 and field in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_unwritable_run_directory(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    code, _, err = cli("search", "--model", "small", "--gpus", "2", "--runs-dir", str(blocked / "runs"))
    assert code == 2 and "run_dir" in err and err.count("\n") == 1


def test_corrupt_study_database(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "study.db").write_bytes(b"this is not a database" * 100)
    code, _, err = cli("search", "--resume", str(run))
    assert code == 2 and "corrupt" in err and err.count("\n") == 1
    with pytest.raises(AutotuneError):
        search_api.resume(run)


def test_cli_draws_the_plots_in_the_background(tmp_path):
    code, out, err = cli("search", "--model", "small", "--gpus", "2", "--json", "--runs-dir", str(tmp_path))
    assert code == 0, err
    run = Path(json.loads(out)["run_dir"])
    deadline = time.monotonic() + 120
    names = {"timeline.png", "memory.png", "pareto.png", "history.png"}
    while time.monotonic() < deadline and not names <= {p.name for p in run.iterdir()}:
        time.sleep(0.2)
    assert names <= {p.name for p in run.iterdir()}
    while time.monotonic() < deadline and (run / "plots.log").exists():
        time.sleep(0.2)
    assert not (run / "plots.log").exists() and "## Plots" in (run / "report.md").read_text()
