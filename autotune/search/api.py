"""``autotune.search`` and ``autotune.resume``: the library entry points of the search.

No disk I/O unless ``run_dir`` (or ``storage``) is given. A search problem is kept as plain
data ("refs": model, workload, cluster and profile by name or content, space, seed, method)
so that a study can be resumed or shared with workers on other machines.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune.spec.runtime import DEFAULT_RUNTIME, resolve_runtime, runtime_from_dict
from autotune.spec.resolve import DEFAULT_CLUSTER, resolve_cluster, training_workload
from autotune.errors import AutotuneError, Interrupted
from autotune.spec import arguments as A
from autotune.plan.io import model_from_dict, plan_file_dict, workload_from_dict
from autotune.search.driver import SearchProblem
from autotune.search.engine import run_search
from autotune.search.result import SearchResult
from autotune.search.space import load_space
from autotune.spec.hardware_data import cluster_names, load_profile
from autotune.spec.presets import resolve_model
from autotune.spec.workload import is_training

__all__ = ["search", "resume", "work", "problem_refs", "problem_from_refs", "study_name_for"]


def _cluster_ref(cluster: Any) -> Any:
    if isinstance(cluster, str) and cluster in cluster_names():
        return cluster
    if isinstance(cluster, (str, Path)):
        path = Path(cluster)
        from autotune.spec.hardware_data import _parse_file
        return {"name": path.stem, "data": _parse_file(path, "cluster")}
    raise AutotuneError("cluster", "a study needs the cluster as a preset name or a cluster file")


def problem_refs(*, model: Any, workload: Any, runtime: Any, cluster: Any, profile: Any, gpus: int, space: Any, seed: int,
                 method: str) -> dict[str, Any]:
    profile_data = profile if isinstance(profile, dict) or profile is None else load_profile(profile)
    space_ref = str(Path(space).resolve()) if str(space).endswith(".toml") else str(space)
    return {"model": asdict(model), "workload": asdict(workload), "runtime": runtime.to_dict(), "cluster": _cluster_ref(cluster),
            "profile": profile_data, "gpus": gpus, "space": space_ref, "seed": seed, "method": method}


def problem_from_refs(refs: dict[str, Any]) -> SearchProblem:
    from autotune.spec.hardware_data import cluster_from_dict

    try:
        cluster_ref = refs["cluster"]
        cluster = (cluster_from_dict(cluster_ref["name"], cluster_ref["data"]) if isinstance(cluster_ref, dict)
                   else cluster_ref)
        return SearchProblem(model=model_from_dict(refs["model"]), workload=workload_from_dict(refs["workload"]),
                             runtime=runtime_from_dict(refs.get("runtime") or {"name": DEFAULT_RUNTIME}),
                             cluster=resolve_cluster(cluster, refs.get("profile")), gpus=int(refs["gpus"]),
                             space=load_space(refs["space"]), seed=int(refs["seed"]), method=refs["method"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        if isinstance(err, AutotuneError):
            raise
        raise AutotuneError("study", f"the recorded problem is malformed ({type(err).__name__}: {err})") from None


def study_name_for(refs: dict[str, Any]) -> str:
    from autotune.search.problem_id import problem_json

    digest = hashlib.sha256(problem_json(refs).encode()).hexdigest()[:10]
    return f"{refs['model']['name']}-{refs['gpus']}gpus-{digest}"


PLOT_MODES = ("sync", "background", "none")


def _finish(problem: SearchProblem, refs: dict, result: SearchResult, run_dir: Path | None, study=None,
            plots: str = "sync") -> SearchResult:
    if run_dir is None:
        return result
    from autotune.outputs.run_dir import write_run
    from autotune.outputs.search_run import report_for, write_search_plots

    result = SearchResult(plan=result.plan, estimate=result.estimate, baselines=result.baselines,
                          stats=result.stats, candidates=result.candidates, run_dir=str(run_dir), runtime=problem.runtime)
    plan_file = plan_file_dict(plan=result.plan, model=problem.model, workload=problem.workload, runtime=problem.runtime,
                               cluster=refs["cluster"], profile=None, estimate=result.estimate.to_dict())
    plan_file["profile"] = refs["profile"]
    report = report_for(problem, result)
    history, points = _history_and_points(study)
    try:
        write_run(run_dir, plan_file=plan_file, search={**result.to_dict(), "problem": refs, "slice_history": history,
                                                        "slice_points": points}, report=report)
    finally:
        _close(study)  # SQLite folds its write-ahead log back into study.db (also when a write failed)
    if plots == "sync":
        write_search_plots(run_dir, result, history, report=report)  # last: a plotting failure cannot lose the run
    elif plots == "background":
        from autotune.outputs.search_run import plots_in_background

        plots_in_background(run_dir)
    return result


def _history_and_points(study) -> tuple[list, list]:
    from autotune.search.study_file import StudyFile

    if study is None:
        return [], []
    if isinstance(study, StudyFile):
        return study.history(), study.points()
    from autotune.search.store import slice_history, slice_points

    return slice_history(study), slice_points(study)


def _close(study) -> None:
    from autotune.search.study_file import StudyFile

    if isinstance(study, StudyFile):
        study.close()
        return
    storage = getattr(study, "_storage", None)
    engine = getattr(getattr(storage, "_backend", storage), "engine", None)
    if engine is not None:
        engine.dispose()


SEARCH_CHECKS = {"model": A.model_arg, "gpus": A.count_arg, "cluster": A.cluster_arg, "workload": A.workload_arg,
                  "space": A.optional_path_arg, "runtime": A.runtime_arg, "seed": A.seed_arg, "method": A.text_arg, "profile": A.profile_arg,
                  "global_batch": A.optional_count_arg, "seq_len": A.optional_count_arg, "dtype": A.text_arg,
                  "attention": A.optional_text_arg, "run_dir": A.optional_path_arg, "runs_dir": A.optional_path_arg,
                  "storage": A.optional_text_arg, "study_name": A.optional_text_arg, "progress": A.callable_arg,
                  "announce": A.callable_arg, "cache": A.bool_arg, "plots": A.text_arg, "baselines": A.bool_arg}


@A.entry_point(SEARCH_CHECKS, excludes={"workload": {"global_batch": "global_batch", "seq_len": "seq_len",
                                                     "attention": "attention_impl", "dtype": "dtype"}})
def search(model: Any, gpus: int, *, cluster: Any = DEFAULT_CLUSTER, workload: Any = None, runtime: Any = None,
           space: Any = None, seed: int = 0, method: str = "optuna", profile: Any = None, global_batch: int | None = None,
           seq_len: int | None = None, dtype: str = "bf16", attention: str | None = None, run_dir: str | Path | None = None,
           runs_dir: str | Path | None = None, storage: str | None = None, study_name: str | None = None,
           progress=None, announce=None, cache: bool = True, plots: str = "sync", baselines: bool = True) -> SearchResult:
    """The fastest plan that fits ``model`` on ``gpus`` GPUs of ``cluster``, run by ``runtime`` (a preset
    name or a Runtime; None: megatron). ``space`` (None: the runtime's own) narrows the plans searched.

    ``run_dir`` (an empty or new directory) keeps the plan study in ``run_dir/study.db`` and
    writes plan.json, search.json and report.md; ``runs_dir`` does the same in a new directory
    ``runs_dir/<time>-<model>-<gpus>`` (``result.run_dir``). Either is created only once every
    input is known to be good, and removed again when the search ends before any slice was
    stored (or with no plan). ``storage`` (an SQLAlchemy URL such as ``postgresql+psycopg://...``)
    keeps the study there instead, shared with ``autotune worker`` processes
    (``announce(study_name, url)`` is called once the slices are queued). ``cache`` uses the
    process-wide plan cache (autotune.search.cache): a repeated query returns at once and
    another GPU count of the same model reuses stage costs. ``plots`` (with a run directory):
    ``sync`` draws them before returning, ``background`` in a detached process, ``none`` not at all.
    ``baselines``: score the hand-made baselines beside the plan (False: none, a faster answer for
    callers that need only the plan, such as autotune.search_many and autotune.scaling_curve).
    """
    import time

    from autotune.errors import require, require_choice

    started_s = time.perf_counter()
    require_choice("plots", plots, PLOT_MODES)
    require_choice("method", method, ("optuna", "exhaustive"))
    require(not (run_dir and runs_dir), "run_dir", "give run_dir or runs_dir, not both")
    spec = resolve_model(model)
    run_by = resolve_runtime(runtime)
    space = run_by.space if space is None else space
    work = workload or training_workload(spec, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                                         attention=attention or run_by.attention_impl)
    _check_length(spec, work)
    problem = SearchProblem(model=spec, workload=work, runtime=run_by, cluster=resolve_cluster(cluster, profile), gpus=gpus,
                            space=load_space(space), seed=seed, method=method)
    problem.cluster.check_gpus(gpus)
    problem.cluster.device.require_dtype(work.dtype)  # FP8 on an A100 and the like: refused at once
    refs = problem_refs(model=spec, workload=work, runtime=run_by, cluster=cluster, profile=profile, gpus=gpus, space=space,
                        seed=seed, method=method) if (run_dir or runs_dir or storage) else None
    made = _NO_RUN_DIR if storage is None else _NewStorage(storage)
    if run_dir is not None or runs_dir is not None:
        from autotune.outputs.run_dir import NewRunDir, make_run_dir  # (the outputs load only for a run directory)

        made = NewRunDir()
        try:  # every input is good: now write, each folder recorded as it is made
            make_run_dir(run_dir, runs_dir, spec.name, gpus, into=made)
        except BaseException as err:
            made.clean_up(err)
            raise
    try:
        study, path = _open_study(refs, made.path, storage, study_name)
        if storage is not None:
            _solve_shared(study, problem, storage, announce)
        from autotune.search.cache import PLAN_CACHE

        result = run_search(problem, study=study, progress=progress, cache=PLAN_CACHE if cache else None,
                            shared=storage is not None, started_s=started_s, with_baselines=baselines)
        return _finish(problem, refs, result, path, study, plots)
    except BaseException as err:
        replaced = _failure(err, made.clean_up(err))
        if replaced is not None:
            raise replaced from None
        raise


def _failure(err: BaseException, note: str) -> BaseException | None:
    """What a failed or interrupted search raises instead of ``err`` (None: ``err`` itself):
    with ``note`` (the finished slices kept) after an interrupt or a refused write, and a
    refused write (a full disk) as one line."""
    from autotune.errors import write_failure

    if isinstance(err, KeyboardInterrupt):
        return Interrupted(note) if note else None
    if isinstance(err, AutotuneError) and err.field == "disk":
        return AutotuneError("disk", f"{err.message}; {note}") if note else None
    return write_failure(err, note)


class _NoRunDir:
    """make_run_dir's answer without a run directory: nothing to clean up."""

    path = None

    def clean_up(self, err: BaseException) -> str:
        return ""


_NO_RUN_DIR = _NoRunDir()


class _NewStorage:
    """A shared SQLite storage this search is about to create: removed again when a full disk (a
    refused write) stops the search before any slice of any study in it was finished, so no
    half-made database is left (one that held anything before, or holds a finished slice, stays)."""

    def __init__(self, storage: str) -> None:
        from autotune.plan.sqlite_url import sqlite_file

        db = sqlite_file(storage)
        self.db = db if db is not None and not db.exists() else None
        self.path = None

    def clean_up(self, err: BaseException) -> str:
        from autotune.errors import write_failure
        from autotune.outputs.run_dir import study_db_summary

        full = (isinstance(err, AutotuneError) and err.field == "disk") or write_failure(err) is not None
        if self.db is not None and full and not any(done for _, done in study_db_summary(self.db) or ()):
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{self.db}{suffix}").unlink(missing_ok=True)
        return ""


def _solve_shared(study, problem: SearchProblem, storage: str, announce) -> None:
    """A shared search: queue the slices, work on them with any workers, wait for all."""
    from autotune.search.worker import queue_slices, wait_for_slices, work_on_queue

    keys = queue_slices(study, problem)
    if announce:
        announce(study.study_name, storage)
    work_on_queue(study, problem)
    wait_for_slices(study, keys)


def _check_length(model, workload) -> None:
    """Sequences longer than the model's positions, and models deeper than a search can hold in
    memory, are refused before any work."""
    from autotune.errors import require
    from autotune.spec.limits import LIMITS

    most, why = LIMITS["search_layers"]
    require(model.num_layers <= most, "model.num_layers", f"{model.num_layers:,} layers are more than a search "
            f"holds: at most {most:,} {why}; autotune evaluate prices a plan of up to {LIMITS['num_layers'][0]:,}")

    longest = workload.seq_len if is_training(workload) else workload.max_context_len
    field = "seq_len" if is_training(workload) else "prompt_len"
    require(longest <= model.max_seq_len, field,
            f"{longest} positions exceed {model.name}'s maximum sequence length {model.max_seq_len}")


def _open_study(refs, run_dir, storage, study_name):
    if refs is None:
        return None, None
    from autotune.outputs.run_dir import STUDY_FILE, check_study_target, study_url

    path = Path(run_dir) if run_dir else None
    name = study_name or study_name_for(refs)
    check_study_target(path, storage, name)  # no other search's study in a run's study.db
    if storage is None and not (path / STUDY_FILE).exists():  # a new run: written without loading Optuna
        import sqlite3

        from autotune.search.study_file import StudyFile

        try:
            return StudyFile(path / STUDY_FILE, name, refs), path
        except (OSError, sqlite3.Error):  # no usable template (an unwritable cache, say): through Optuna
            (path / STUDY_FILE).unlink(missing_ok=True)
    url = storage or study_url(path)
    from autotune.search.store import open_study

    return open_study(url, name, refs, heartbeat=storage is not None), path


@A.entry_point({"run_dir": A.path_arg, "progress": A.callable_arg, "plots": A.text_arg})
def resume(run_dir: str | Path, *, progress=None, plots: str = "sync") -> SearchResult:
    """Continue an interrupted search from its run directory's study; finished slices are kept.
    The study is read without writing until it is known to hold one recorded problem."""
    from autotune.errors import require_choice
    from autotune.outputs.run_dir import STUDY_FILE, resume_note, study_url
    from autotune.search.store import open_study

    require_choice("plots", plots, PLOT_MODES)
    path = Path(run_dir)
    db = path / STUDY_FILE
    if not db.is_file():
        raise AutotuneError("resume", f"{str(path)!r} has no {STUDY_FILE}; give a run directory made by autotune search")
    name, refs = _recorded_problem(db)
    _check_same_run(path, refs)
    problem = problem_from_refs(refs)
    study = open_study(study_url(path), name)
    try:
        return _finish(problem, refs, run_search(problem, study=study, progress=progress), path, study, plots)
    except BaseException as err:
        replaced = _failure(err, resume_note(path))
        if replaced is not None:
            raise replaced from None
        raise


def _check_same_run(path: Path, refs: dict) -> None:
    """A finished run's search.json names the problem its study.db was made for; a study.db of
    another problem put in its place is refused, not resumed over the run's files. (A search.json
    that does not read is rebuilt from the study, as an interrupted run's missing one is.)"""
    from autotune.outputs.run_dir import STUDY_FILE
    from autotune.search.problem_id import problem_json
    from autotune.spec.json_file import read_json_file

    try:
        record = read_json_file(path / "search.json", "run")
    except AutotuneError:
        return
    recorded = record.get("problem") if isinstance(record, dict) else None
    if isinstance(recorded, dict) and problem_json(recorded) != problem_json(refs):
        raise AutotuneError("resume", f"{str(path / STUDY_FILE)!r} holds the study of another problem than the run's "
                                      "search.json; a run directory keeps its own study (start a new search)")


def _recorded_problem(db: Path) -> tuple[str, dict]:
    """The one study of a run's study.db and the problem it recorded, read-only."""
    import sqlite3
    from contextlib import closing

    from autotune.outputs.run_dir import read_only_uri, study_db_summary
    from autotune.search.store import PROBLEM_ATTR

    summary = study_db_summary(db)
    if summary is None:
        raise AutotuneError("resume", f"cannot read {str(db)!r} as a study database (corrupt?)")
    if len(summary) != 1:
        raise AutotuneError("resume", f"{str(db)!r} holds {len(summary)} studies; expected the one autotune search made")
    try:
        with closing(sqlite3.connect(read_only_uri(db), uri=True)) as conn:
            row = conn.execute("SELECT a.value_json FROM study_user_attributes a JOIN studies s ON a.study_id = s.study_id "
                               "WHERE a.key = ?", (PROBLEM_ATTR,)).fetchone()
        refs = json.loads(row[0]) if row else None
    except (sqlite3.Error, json.JSONDecodeError):
        refs = None
    if not isinstance(refs, dict) or not refs:
        raise AutotuneError("resume", f"the study in {str(db.parent)!r} has no recorded problem")
    return summary[0][0], refs


def work(study_name: str, storage: str, *, on_done=None) -> int:
    """Join a shared search: solve queued slices of ``study_name`` until none is left."""
    from autotune.search.store import PROBLEM_ATTR, open_study
    from autotune.search.worker import work_on_queue

    study = open_study(storage, study_name, heartbeat=True)
    refs = study.user_attrs.get(PROBLEM_ATTR)
    if not refs:
        raise AutotuneError("study", f"study {study_name!r} was not made by autotune search (no problem recorded)")
    return work_on_queue(study, problem_from_refs(refs), on_done=on_done)
