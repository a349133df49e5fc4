"""A new run's study.db, written with plain sqlite3 (autotune.search.study_file), is the study
Optuna's own add_trial makes from the same slices: Optuna reads the same trials back, and an
interrupted run resumes from it."""

from __future__ import annotations

import optuna
import pytest

from autotune.outputs.run_dir import study_db_summary
from autotune.search.driver import SliceKey, SliceOutcome
from autotune.search.store import finished_slices, open_study, record_slice, slice_history, slice_points
from autotune.search.study_file import StudyFile
from tests.test_study import _outcome


@pytest.fixture(scope="module")
def outcomes():
    fits = _outcome(8, tp=8, zero=1, recompute="full")
    too_big = _outcome(1, micro_batch=2)
    mixed = _outcome(8, tp=4, pp=2, zero=0, recompute="selective")
    none = SliceOutcome(key=SliceKey(2, 1), plan=None, estimate=None, lower_bound_s=0.0)
    pruned = SliceOutcome(key=SliceKey(4, 2), plan=None, estimate=None, lower_bound_s=1.5, pruned=True)
    return [fits, too_big, mixed, none, pruned]


def _seen(trial: optuna.trial.FrozenTrial) -> tuple:
    return (trial.number, trial.state, trial.params, trial.distributions, trial.values, trial.user_attrs,
            trial.system_attrs)


def test_study_file_reads_back_as_optunas_own_study(tmp_path, outcomes, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    problem = {"model": {"name": "m"}, "gpus": 8}
    reference = open_study(f"sqlite:///{tmp_path / 'ref.db'}", "s", problem=problem)
    fast = StudyFile(tmp_path / "fast.db", "s", problem)
    for outcome in outcomes:
        record_slice(reference, outcome, "base")
        fast.record(outcome, "base")
    loaded = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'fast.db'}")
    assert [_seen(t) for t in loaded.get_trials()] == [_seen(t) for t in reference.get_trials()]
    assert loaded.user_attrs == reference.user_attrs and loaded.direction == reference.direction
    assert fast.history() == slice_history(reference)
    assert fast.points() == slice_points(reference)
    assert finished_slices(loaded).keys() == finished_slices(reference).keys()  # what --resume skips
    fast.close()
    assert study_db_summary(tmp_path / "fast.db") == [("s", 4)]  # COMPLETE and PRUNED trials


def test_a_run_directory_study_is_written_without_optuna_and_resumes(tmp_path, monkeypatch):
    """A new run writes study.db itself; resume (which opens it with Optuna) finds every slice."""
    from autotune.search.api import resume, search

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    first = search("small", 4, run_dir=run, cache=False, plots="none")
    assert not (run / "study.db-wal").exists()  # every slice is in study.db itself
    again = resume(run, plots="none")
    assert again.stats.num_slices_resumed == first.stats.num_slices
    assert again.estimate.step_time_s == pytest.approx(first.estimate.step_time_s)


def test_an_unusable_template_falls_back_to_optuna(tmp_path, monkeypatch):
    """With no cache directory to keep the template in, the run's study is made by Optuna."""
    from autotune.search.api import search

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(blocked / "cache"))
    run = tmp_path / "run"
    result = search("small", 4, run_dir=run, cache=False, plots="none")
    loaded = optuna.load_study(study_name=study_db_summary(run / "study.db")[0][0], storage=f"sqlite:///{run / 'study.db'}")
    assert len(loaded.get_trials()) == result.stats.num_slices
