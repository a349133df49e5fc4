"""A study worker for tests/test_postgres.py: runs trials of a shared Optuna study until told to stop.

    python tests/pg_study_worker.py URL STUDY ROLE WORKDIR

ROLE ``worker`` runs short trials until ``WORKDIR/stop`` exists, logging each finished trial to
``WORKDIR/finished-<pid>.log`` as ``number value`` just before returning it. ROLE ``victim``
writes ``WORKDIR/victim-trial`` (its trial number) and then hangs in its first trial, to be killed
with SIGKILL. Heartbeats every second; a trial whose heartbeat is 3 s old is failed and retried
once (RetryHeartbeatStaleTrialCallback, Optuna >= 4.9). The template of the ``autotune worker`` test.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import optuna

HEARTBEAT_INTERVAL_S = 1
GRACE_PERIOD_S = 3


def storage(url: str) -> optuna.storages.RDBStorage:
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    return optuna.storages.RDBStorage(
        url, heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S,
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))


def main(url: str, study_name: str, role: str, workdir: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=storage(url))
    log = workdir / f"finished-{os.getpid()}.log"

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_int("x", 0, 10**9)
        if role == "victim":
            (workdir / "victim-trial").write_text(str(trial.number))
            time.sleep(3600)
        time.sleep(0.05)
        with log.open("a") as handle:
            handle.write(f"{trial.number} {x}\n")
        return float(x)

    def stop_when_told(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if (workdir / "stop").exists():
            study.stop()

    study.optimize(objective, callbacks=[stop_when_told], n_trials=None if role == "worker" else 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
