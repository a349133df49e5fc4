"""Checks of the cost model against runs others measured."""

from autotune.calibrate.published import PublishedRun, RunCheck, check_runs, load_published_runs

__all__ = ["PublishedRun", "RunCheck", "check_runs", "load_published_runs"]
