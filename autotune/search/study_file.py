"""A run's plan study written straight into an Optuna SQLite file, without loading Optuna.

Opening a new study through Optuna's RDB storage costs seconds (SQLAlchemy and Alembic imports,
schema creation, a dozen queries per trial); a search of a small model takes less. A new run
directory's ``study.db`` is therefore made by copying an empty database that Optuna itself
created (once per Optuna version, kept in the user's cache directory) and adding the study and
one trial per finished slice with plain ``sqlite3``, each slice committed as it finishes (an
interrupted search loses none). The result is the same study Optuna's ``add_trial`` makes:
``optuna.load_study``, optuna-dashboard and ``autotune search --resume`` read it as usual
(tests/test_study_file.py compares the two). Optuna is still used for existing studies,
shared (PostgreSQL) studies and workers (autotune.search.store).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from autotune.search.problem_id import problem_attrs

__all__ = ["StudyFile", "slice_attrs", "plan_choice_attrs", "memory_constraint", "slice_value", "choice_params",
           "INT_PARAMS", "CATEGORICAL_PARAMS", "CONSTRAINTS_KEY", "BASE_ROUND", "template_path"]

CONSTRAINTS_KEY = "constraints"  # Optuna's (and optuna-dashboard's) system attribute of constraint values
BASE_ROUND = "base"  # slices of the space as given; "offload" marks the fallback round
# Trial parameters: integers (low, high) and categoricals (choices), as Optuna distributions.
INT_PARAMS = {"dp": (1, 1 << 20), "micro_batch": (1, 1 << 20), "pp": (1, 1 << 20), "vpp": (1, 1 << 10),
              "tp": (1, 1 << 20), "cp": (1, 1 << 20), "zero": (0, 3)}
_PLACEMENTS = ("weights_in", "optimizer_in", "gradients_in", "activations_in")


def _categorical_params() -> dict[str, tuple]:
    from autotune.plan.plan import RECOMPUTE, SCHEDULES

    return {"schedule": tuple(SCHEDULES), "recompute": tuple(RECOMPUTE)}


CATEGORICAL_PARAMS = _categorical_params()


def slice_attrs(outcome) -> dict[str, Any]:
    est = outcome.estimate
    attrs = {"plan": json.dumps(outcome.plan.to_dict()) if outcome.plan else None,
             "fits": bool(est.fits) if est else False, "lower_bound_s": outcome.lower_bound_s,
             "tokens_per_s": est.tokens_per_s if est else 0.0,
             "peak_memory_bytes_per_gpu": est.peak_memory_bytes_per_gpu if est else 0.0}
    if est is not None and not est.fits:
        attrs["no_fit_reason"] = est.reason or "over memory"
    elif est is None and not outcome.pruned:
        attrs["no_fit_reason"] = "no plan of this slice could be built"
    return {**attrs, **plan_choice_attrs(outcome.plan)}


def _joined(values: list) -> Any:
    """One value when every stage has it, else the stages' values joined with '/'."""
    return values[0] if len(set(values)) == 1 else "/".join(str(v) for v in values)


def plan_choice_attrs(plan) -> dict[str, Any]:
    """The intra-op choices of a slice's best plan (tp, cp, zero, recomputation...), one value
    each, or the stages' values joined with '/' where stages differ: trial user attributes a
    person filters by in optuna-dashboard."""
    if plan is None:
        return {}
    stages = plan.stages
    attrs: dict[str, Any] = {"pp": plan.pp, "vpp": plan.vpp, "schedule": plan.schedule,
                             "num_microbatches": plan.num_microbatches}
    for name in ("tp", "cp", "zero", "recompute", "sequence_parallel", "mesh_order"):
        attrs[name] = _joined([getattr(s, name) for s in stages])
    attrs["layers_per_stage"] = "/".join(str(s.num_layers) for s in stages)
    offload = sorted({f"{n[:-3]}:{getattr(s, n)}" for s in stages for n in _PLACEMENTS if getattr(s, n, "hbm") != "hbm"})
    attrs["offload"] = ",".join(offload) or "none"
    return attrs


def memory_constraint(outcome) -> list[float] | None:
    """Optuna constraint values of a slice: GiB of its best plan's peak memory over the GPU's
    capacity (<= 0: feasible); None when the slice has no plan."""
    est = outcome.estimate
    if est is None:
        return None
    over_gib = (est.peak_memory_bytes_per_gpu - est.memory_capacity_bytes) / 2**30
    if not est.fits and over_gib <= 0:
        over_gib = 1.0  # it fails for another reason (no_fit_reason says which): still infeasible
    return [over_gib]


def slice_value(outcome) -> float | None:
    """The trial value: the best plan's step time, also for an infeasible slice (its plan's
    step time were memory no object); None when no plan was built."""
    est = outcome.estimate
    if est is None or not math.isfinite(est.step_time_s):
        return None
    return est.step_time_s


def choice_params(outcome) -> dict[str, Any]:
    """Plan choices that are one value for the whole plan, as trial parameters (slice and
    importance plots); choices that differ between stages stay user attributes only."""
    attrs = plan_choice_attrs(outcome.plan)
    params = {}
    for name in (*INT_PARAMS, *CATEGORICAL_PARAMS):
        value = attrs.get(name)
        if name in INT_PARAMS and isinstance(value, int) and not isinstance(value, bool):
            params[name] = value
        elif name in CATEGORICAL_PARAMS and value in CATEGORICAL_PARAMS[name]:
            params[name] = value
    return params


def _param_row(name: str, value: Any) -> tuple[float, str]:
    """(internal value, distribution JSON) as Optuna stores a parameter."""
    if name in INT_PARAMS:
        low, high = INT_PARAMS[name]
        dist = {"name": "IntDistribution", "attributes": {"log": False, "step": 1, "low": low, "high": high}}
        return float(value), json.dumps(dist)
    choices = CATEGORICAL_PARAMS[name]
    return float(choices.index(value)), json.dumps({"name": "CategoricalDistribution", "attributes": {"choices": list(choices)}})


def _optuna_version() -> str:
    """Optuna's version from its optuna/version.py, read without importing Optuna or
    importlib.metadata (which costs a CLI start 30-90 ms); the installed metadata where the file
    does not say it plainly."""
    import importlib.util

    spec = importlib.util.find_spec("optuna")
    if spec is not None and spec.origin:
        try:
            text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
        except OSError:
            text = ""
        found = re.fullmatch(r'\s*__version__\s*=\s*"([0-9A-Za-z.+-]+)"\s*', text)
        if found:
            return found.group(1)
    from importlib.metadata import version

    return version("optuna")


def template_path() -> Path:
    """The empty study database Optuna made for the installed Optuna version (made on first use)."""
    root = Path(os.environ.get("AUTOTUNE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autotune")
    path = root / f"optuna-{_optuna_version()}-empty-study.db"
    if not path.is_file():
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".db")
        os.close(fd)
        os.unlink(tmp)
        import optuna

        from autotune.plan.sqlite_url import sqlite_url

        try:
            storage = optuna.storages.RDBStorage(sqlite_url(tmp))
            storage.engine.dispose()
            os.replace(tmp, path)  # atomic: concurrent makers each write a whole file
        finally:
            Path(tmp).unlink(missing_ok=True)  # (a failure, a full disk: no half-made template)
    return path


class StudyFile:
    """A new Optuna study in ``db`` (which must not exist), written with plain sqlite3."""

    def __init__(self, db: Path, name: str, problem: dict[str, Any]) -> None:
        self.path, self.study_name = db, name
        self.records: list[dict[str, Any]] = []  # what each recorded trial holds, in order
        self._conn: sqlite3.Connection | None = None
        try:
            shutil.copyfile(template_path(), db)
            self._conn = sqlite3.connect(db, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")  # as autotune.search.store: a commit waits for no fsync,
            self._conn.execute("PRAGMA synchronous=NORMAL")  # a committed slice survives the process being killed
            self._add_study(name, problem)
        except BaseException:  # a full disk, say: no half-made database is left behind
            self._discard()
            raise

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _add_study(self, name: str, problem: dict[str, Any]) -> None:
        with self._conn:
            self._conn.execute("BEGIN")
            self.study_id = self._conn.execute("INSERT INTO studies (study_name) VALUES (?)", (name,)).lastrowid
            self._conn.execute("INSERT INTO study_directions (direction, study_id, objective) VALUES ('MINIMIZE', ?, 0)",
                               (self.study_id,))
            self._conn.executemany("INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (?, ?, ?)",
                                   [(self.study_id, k, json.dumps(v)) for k, v in problem_attrs(problem).items()])

    def record(self, outcome, round_name: str = BASE_ROUND) -> None:
        """Commit one solved slice as autotune.search.store.record_slice does through Optuna."""
        value = None if outcome.pruned else slice_value(outcome)
        state = "PRUNED" if outcome.pruned else "COMPLETE" if value is not None else "FAIL"
        params = {"dp": outcome.key.dp, "micro_batch": outcome.key.micro_batch, **choice_params(outcome)}
        constraint = None if outcome.pruned else memory_constraint(outcome)
        user = {**slice_attrs(outcome), "round": round_name}
        system = {CONSTRAINTS_KEY: constraint} if constraint is not None else {}
        try:
            self._insert_trial(state, value, params, user, system)
        except sqlite3.Error:  # a full disk, say: the slice is rolled back, and the file is closed whole
            self.close()
            raise
        self.records.append({"value": value, "state": state, "user_attrs": user, "system_attrs": system})

    def _insert_trial(self, state: str, value: float | None, params: dict, user: dict, system: dict) -> None:
        now = datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
        c = self._conn
        with c:
            c.execute("BEGIN")
            trial = c.execute("INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) "
                              "VALUES (?, ?, ?, ?, ?)", (len(self.records), self.study_id, state, now, now)).lastrowid
            c.executemany("INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES (?, ?, ?, ?)",
                          [(trial, k, *_param_row(k, v)) for k, v in params.items()])
            if value is not None:
                c.execute("INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?, 0, ?, 'FINITE')",
                          (trial, value))
            c.executemany("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                          [(trial, k, json.dumps(v)) for k, v in user.items()])
            c.executemany("INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                          [(trial, k, json.dumps(v)) for k, v in system.items()])

    def history(self) -> list[tuple[int, float | None]]:
        """As autotune.search.store.slice_history: (order solved, step time s or None)."""
        def shown(r) -> float | None:
            feasible = all(c <= 0 for c in r["system_attrs"].get(CONSTRAINTS_KEY) or ())
            return r["value"] if r["value"] is not None and math.isfinite(r["value"]) and feasible else None
        return [(i + 1, shown(r)) for i, r in enumerate(self.records)]

    def points(self) -> list[dict[str, Any]]:
        """As autotune.search.store.slice_points: each slice's best fitting plan."""
        return [{"tokens_per_s": a["tokens_per_s"], "peak_memory_bytes_per_gpu": a["peak_memory_bytes_per_gpu"],
                 "plan": json.loads(a["plan"])} for a in (r["user_attrs"] for r in self.records)
                if a.get("fits") and a.get("plan")]

    def close(self) -> None:
        """Fold the write-ahead log back into the file (closing the last connection does)."""
        self._conn.close()
