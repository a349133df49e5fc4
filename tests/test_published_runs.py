"""The cost model against 19 published Megatron-LM runs (A100 SC'21, H100 Megatron-Core)."""

from autotune.calibrate import check_runs, load_published_runs


def test_published_iteration_times(data_dir):
    checks = check_runs(load_published_runs(data_dir / "published_runs.csv"))
    errors = {c.run.run_id: abs(c.error) for c in checks}
    assert len(errors) == 19
    assert sum(errors.values()) / len(errors) <= 0.10, errors
    assert max(errors.values()) <= 0.20, errors


def test_published_runs_fit_in_memory(data_dir):
    # They ran, so the model must say they fit on their 80 GB GPUs.
    for check in check_runs(load_published_runs(data_dir / "published_runs.csv")):
        assert check.estimate.fits, (check.run.run_id, check.estimate.reason)
