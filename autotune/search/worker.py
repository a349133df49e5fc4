"""Shared searches: slices queued in a study that any number of processes work through.

``search --storage URL`` queues every slice, works on them itself, waits for the others, and
collects the result; ``autotune worker`` joins. Heartbeats (``HEARTBEAT_S``) let live processes
mark a dead worker's trial failed after a grace period; Optuna's RetryFailedTrialCallback then
queues a copy, so the slice is done once by someone and no finished slice is lost.
"""

from __future__ import annotations

import os
import socket
import time
import warnings

import optuna
from optuna.trial import TrialState

from autotune.search.driver import SearchProblem, SliceKey, SliceOutcome, SliceSearch, plan_slices
from autotune.search.store import (
    CONSTRAINTS_KEY, HEARTBEAT_S, enqueue_slices, finished_slices, memory_constraint, queued_params, slice_attrs,
    slice_value)

__all__ = ["work_on_queue", "wait_for_slices", "queue_slices"]


def _objective(study: optuna.Study, search: SliceSearch, on_done):
    def objective(trial: optuna.Trial) -> float:
        if queued_params(study, trial) is None:
            study.stop()  # the queue was empty when this trial was made: stop, count nothing
            raise optuna.TrialPruned("no queued slice")
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # who holds the slice
        key = SliceKey(trial.suggest_int("dp", 1, 1 << 20), trial.suggest_int("micro_batch", 1, 1 << 20))
        plan, estimate = search.solve_slice(key)
        outcome = SliceOutcome(key=key, plan=plan, estimate=estimate, lower_bound_s=0.0)
        for name, value in slice_attrs(outcome).items():
            trial.set_user_attr(name, value)
        constraint = memory_constraint(outcome)
        if constraint is not None:  # the list form optuna-dashboard reads (store.record_slice writes the same)
            trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, constraint)
        if on_done:
            on_done(outcome)
        value = slice_value(outcome)
        return float("nan") if value is None else value  # nan: Optuna marks the trial FAIL (no plan built)
    return objective


def _fail_stale_trials(study: optuna.Study) -> None:
    with warnings.catch_warnings():  # "experimental" in Optuna 5 (as in store.py), not the user's concern
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _states(study: optuna.Study) -> set[TrialState]:
    return {t.state for t in study.get_trials(deepcopy=False)}


def work_on_queue(study: optuna.Study, problem: SearchProblem, *, on_done=None, search: SliceSearch | None = None) -> int:
    """Solve queued slices until none is waiting or running anywhere; returns how many this
    process solved."""
    search = search or SliceSearch(problem)
    solved = [0]

    def count(outcome):
        solved[0] += 1
        if on_done:
            on_done(outcome)
    objective = _objective(study, search, count)
    while True:
        states = _states(study)
        if TrialState.WAITING in states:
            study.optimize(objective, n_trials=None, catch=())
            continue
        if TrialState.RUNNING not in states:
            return solved[0]
        time.sleep(min(1.0, HEARTBEAT_S))
        _fail_stale_trials(study)  # a dead worker's slice goes back in the queue


def queue_slices(study: optuna.Study, problem: SearchProblem) -> list[SliceKey]:
    keys = plan_slices(problem)
    enqueue_slices(study, keys)
    return keys


def wait_for_slices(study: optuna.Study, keys: list[SliceKey], timeout_s: float = 3600.0) -> None:
    """Block until every slice has a finished trial (others may still be working)."""
    deadline = time.monotonic() + timeout_s
    while len(set(finished_slices(study)) & {(k.dp, k.micro_batch) for k in keys}) < len(keys):
        if time.monotonic() > deadline:
            raise TimeoutError("slices still unfinished")
        time.sleep(min(1.0, HEARTBEAT_S))
        _fail_stale_trials(study)
