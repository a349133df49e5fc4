"""The plan study: one Optuna trial per slice (dp, micro-batch), in SQLite or PostgreSQL.

Every solved slice is committed as soon as it is done, so an interrupted search loses no
finished slice and ``--resume`` skips them. A study can also be shared: ``enqueue_slices``
puts every slice in the queue as a waiting trial and any number of ``autotune worker``
processes pop them; heartbeats mark the trials of dead workers failed and re-queue them once.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from autotune.errors import AutotuneError, require, write_failure
from autotune.search.problem_id import PROBLEM_ATTR, check_problem, problem_attrs
from autotune.plan.sqlite_url import sqlite_file
from autotune.search.study_file import (BASE_ROUND, CATEGORICAL_PARAMS, CONSTRAINTS_KEY, INT_PARAMS, choice_params,
                                        memory_constraint, plan_choice_attrs, slice_attrs, slice_value)

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a study's INFO lines are not the CLI's output

__all__ = ["open_study", "record_slice", "finished_slices", "enqueue_slices", "queued_params", "slice_attrs",
           "slice_value", "shared_trials", "TRIALS_ATTR", "slice_history", "slice_points", "PROBLEM_ATTR", "HEARTBEAT_S",
           "heartbeat_settings", "plan_choice_attrs", "memory_constraint", "CONSTRAINTS_KEY", "FINISHED_STATES"]

HEARTBEAT_S = 5  # seconds between heartbeats of a running trial; $AUTOTUNE_HEARTBEAT_S overrides
GRACE_S = 20  # seconds without a heartbeat before a trial's process counts as dead; $AUTOTUNE_GRACE_S overrides
_DISTRIBUTIONS = {k: IntDistribution(*INT_PARAMS[k]) for k in ("dp", "micro_batch")}


def heartbeat_settings() -> tuple[int, int]:
    """(heartbeat interval, grace period) in whole seconds (Optuna's unit): HEARTBEAT_S and GRACE_S,
    or $AUTOTUNE_HEARTBEAT_S and $AUTOTUNE_GRACE_S (shorter ones let tests see a dead worker's
    slice retried in seconds). Every process of a shared study should use the same."""
    values = []
    for name, default in (("AUTOTUNE_HEARTBEAT_S", HEARTBEAT_S), ("AUTOTUNE_GRACE_S", GRACE_S)):
        text = os.environ.get(name, "").strip()
        value = int(text) if text.isdigit() else (default if not text else 0)
        require(value > 0, name, f"must be a positive whole number of seconds, got {text!r}")
        values.append(value)
    require(values[1] > values[0], "AUTOTUNE_GRACE_S",
            f"the grace period ({values[1]} s) must exceed the heartbeat interval ({values[0]} s)")
    return values[0], values[1]


def _storage(url: str, heartbeat: bool) -> optuna.storages.BaseStorage:
    kwargs: dict[str, Any] = {}
    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna 5, and what we need
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if heartbeat:
            interval_s, grace_s = heartbeat_settings()
            kwargs = {"heartbeat_interval": interval_s, "grace_period": grace_s,
                      "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2)}
        try:
            return _retrying_races(lambda: _open_storage(url, kwargs))
        except Exception as err:  # SQLAlchemy raises many types for bad URLs and dead servers
            failure = write_failure(err)  # a full disk, a read-only file system
            raise failure or AutotuneError("storage", f"cannot open {url!r}: {str(err).splitlines()[0][:200]}") from None


def _open_storage(url: str, kwargs: dict[str, Any]) -> optuna.storages.BaseStorage:
    storage = optuna.storages.RDBStorage(url, **kwargs)
    if url.startswith("sqlite"):
        _fast_sqlite(storage)
    return storage


# Two processes that open one new database at once both try to create Optuna's schema (or the
# same study); the loser sees one of these. What the winner made is what it wanted, so try again,
# backing off, for up to RACE_WAIT_S: on a loaded machine a writer can hold SQLite's lock for
# seconds, longer than a fixed number of quick retries lasts.
RACE_WAIT_S = 60.0
_RACE_SIGNS = ("alembic_version", "already exists", "database is locked", "duplicate key", "UNIQUE constraint failed")


def _schema_race(err: BaseException) -> bool:
    """Whether ``err`` or what it wraps shows the race: Optuna re-raises a failed commit as
    StorageInternalError ("An exception is raised during the commit") from SQLAlchemy's error."""
    seen = 0
    while err is not None and seen < 8:
        if any(sign in str(err) for sign in _RACE_SIGNS):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def _retrying_races(action):
    """``action()``, again after a short wait while it fails with a sign of another process's
    concurrent schema or study creation; any other failure, or one past RACE_WAIT_S, is raised."""
    deadline, wait_s = time.monotonic() + RACE_WAIT_S, 0.05
    while True:
        try:
            return action()
        except Exception as err:
            if not _schema_race(err) or time.monotonic() + wait_s > deadline:
                raise
            time.sleep(wait_s)
            wait_s = min(2 * wait_s, 2.0)


def _fast_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """Write-ahead log with NORMAL sync: a commit no longer waits for fsync (18 ms each here),
    and a committed trial still survives the process being killed (only a power loss can
    drop the last ones) -- SQLite's documented trade-off for WAL mode.

    Every transaction is ``BEGIN IMMEDIATE`` (SQLAlchemy's recipe for pysqlite): by default
    pysqlite starts a transaction only at the first write, so Optuna's "read the waiting trial,
    mark it running" is two steps, and two searches sharing one SQLite storage both took the
    same queued slice (the second then failed to finish it). Holding the write lock from the
    read on makes the step atomic, as PostgreSQL's row locks do; waiters queue on busy_timeout."""
    from sqlalchemy import event

    @event.listens_for(storage.engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # pysqlite emits no BEGIN of its own; _begin does
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(RACE_WAIT_S * 1000)}")
        cursor.close()

    @event.listens_for(storage.engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    storage.engine.dispose()  # connections opened so far predate the pragmas


def open_study(url: str, name: str, problem: dict | None = None, *, heartbeat: bool = False) -> optuna.Study:
    """Create (with ``problem``) or load (without) the plan study ``name`` at ``url``. Loading
    from an SQLite file that does not exist is refused (opening it would create it)."""
    db = sqlite_file(url)
    if problem is None and db is not None:
        from autotune.outputs.run_dir import study_db_summary

        require(db.is_file(), "storage", f"no study database at {str(db)!r}; give the URL autotune search printed")
        names = [n for n, _ in study_db_summary(db) or ()]  # read-only: a refused load leaves the file as it was
        require(name in names, "study", f"no study {name!r} at {url!r}; studies there: {', '.join(names) or 'none'}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" or per-trial lines on stderr
    storage = _storage(url, heartbeat)
    try:
        if problem is None:
            study = optuna.load_study(study_name=name, storage=storage)
        else:
            study = _retrying_races(lambda: _created_study(storage, name, problem))
        check_problem(study.user_attrs, problem, f"study {name!r} at {url!r}")
        return study
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise AutotuneError("study", f"no study {name!r} at {url!r}; studies there: {', '.join(known) or 'none'}") from None
    except AutotuneError:
        raise
    except Exception as err:
        raise write_failure(err) or AutotuneError(
            "study", f"cannot read the study database at {url!r} (corrupt?): {str(err).splitlines()[0][:160]}") from None


def _created_study(storage, name: str, problem: dict) -> optuna.Study:
    """The study ``name``, created or loaded; a new one records ``problem`` (canonical: as read back)."""
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize", load_if_exists=True)
    if PROBLEM_ATTR not in study.user_attrs:
        for key, value in problem_attrs(problem).items():
            study.set_user_attr(key, value)
    return study


_CHOICE_DISTRIBUTIONS = {**{k: IntDistribution(*INT_PARAMS[k]) for k in ("pp", "vpp", "tp", "cp", "zero")},
                         **{k: CategoricalDistribution(v) for k, v in CATEGORICAL_PARAMS.items()}}


def record_slice(study: optuna.Study, outcome, round_name: str = BASE_ROUND) -> None:
    """Commit one solved slice: COMPLETE with its best plan's step time (infeasible, by an
    Optuna constraint, when that plan does not fit), PRUNED when its bound ruled it out, FAIL
    when no plan of it could be built. Never a stand-in value."""
    value = None if outcome.pruned else slice_value(outcome)
    state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE if value is not None else TrialState.FAIL
    params = {"dp": outcome.key.dp, "micro_batch": outcome.key.micro_batch, **choice_params(outcome)}
    constraint = None if outcome.pruned else memory_constraint(outcome)
    trial = optuna.trial.create_trial(
        params=params, distributions={k: {**_DISTRIBUTIONS, **_CHOICE_DISTRIBUTIONS}[k] for k in params},
        value=value, state=state, user_attrs={**slice_attrs(outcome), "round": round_name},
        system_attrs={CONSTRAINTS_KEY: constraint} if constraint is not None else {})
    study.add_trial(trial)


FINISHED_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def finished_slices(study: optuna.Study, round_name: str = BASE_ROUND) -> dict[tuple[int, int], optuna.trial.FrozenTrial]:
    """Finished slice trials of one search round by (dp, micro_batch); a slice counts once."""
    out: dict[tuple[int, int], optuna.trial.FrozenTrial] = {}
    for trial in study.get_trials(deepcopy=False, states=FINISHED_STATES):
        if trial.state == TrialState.FAIL and "no_fit_reason" not in trial.user_attrs:
            continue  # a crash or a dead worker, not a solved slice
        if "dp" in trial.params and trial.user_attrs.get("round", BASE_ROUND) == round_name:
            out.setdefault((trial.params["dp"], trial.params["micro_batch"]), trial)
    return out


def enqueue_slices(study: optuna.Study, keys) -> int:
    """Queue every slice not finished or already queued; returns how many were added."""
    done = finished_slices(study)
    queued = {(t.params.get("dp"), t.params.get("micro_batch"))
              for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))}
    added = 0
    for key in keys:
        if (key.dp, key.micro_batch) not in done and (key.dp, key.micro_batch) not in queued:
            study.enqueue_trial({"dp": key.dp, "micro_batch": key.micro_batch})
            added += 1
    return added


def queued_params(study: optuna.Study, trial: optuna.Trial) -> dict | None:
    """The slice a running trial was queued with (None: not from the queue)."""
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if frozen.number == trial.number:
            return frozen.system_attrs.get("fixed_params")
    return None


TRIALS_ATTR = "intra_op_trials"  # intra-op trials a shared search's process spent on a slice


def shared_trials(study) -> int:
    """Intra-op trials every process of a shared search spent on the study's slices."""
    if study is None:
        return 0
    return sum(int(t.user_attrs.get(TRIALS_ATTR, 0)) for t in study.get_trials(deepcopy=False)
               if "dp" in t.params)  # a slice with no plan (FAIL) cost trials too; a killed one recorded none


def _feasible(trial) -> bool:
    return all(c <= 0 for c in trial.system_attrs.get(CONSTRAINTS_KEY) or ())


def slice_history(study) -> list[tuple[int, float | None]]:
    """(order solved, step time s) of the plan study's slice trials; None where the slice was
    pruned by its bound, failed, or nothing of it fits (infeasible)."""
    trials = [t for t in study.get_trials(deepcopy=False) if "dp" in t.params and t.datetime_complete is not None]
    trials.sort(key=lambda t: (t.datetime_complete, t.number))
    return [(i + 1, t.value if t.value is not None and math.isfinite(t.value) and _feasible(t) else None)
            for i, t in enumerate(trials)]


def slice_points(study) -> list[dict[str, Any]]:
    """Each solved slice's best fitting plan with its throughput and memory (for Pareto plots)."""
    points = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        if attrs.get("fits") and attrs.get("plan"):
            points.append({"tokens_per_s": attrs["tokens_per_s"],
                           "peak_memory_bytes_per_gpu": attrs["peak_memory_bytes_per_gpu"],
                           "plan": json.loads(attrs["plan"])})
    return points
