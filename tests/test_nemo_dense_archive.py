"""Megatron-Bridge's other dense Llama 3 pre-training rows (tests/data/nemo_dense_archive.csv, built by
scripts/nemo_dense_archive.py from the performance tables of releases 25.11-26.06): rows the model
was never compared with before they were added, priced with the same NeMo defaults as the given rows."""

from archive_rows import priced_checks, read_rows

from autotune.calibrate.published import check_published
from autotune.calibrate.regimes import overall_error

LAYOUT = ("source", "model", "gpus", "precision", "global_batch", "micro_batch", "tp", "pp", "cp", "vpp")


def test_every_row_is_priced_and_none_repeats_a_given_row(data_dir):
    rows = read_rows(data_dir / "nemo_dense_archive.csv")
    priced_checks(data_dir / "nemo_dense_archive.csv")
    given = {tuple(r[k] for k in LAYOUT) for r in read_rows(data_dir / "modern_runs.csv")}
    assert not given & {tuple(r[k] for k in LAYOUT) for r in rows}


def test_archive_accuracy(data_dir):
    # 34 rows at 7.6% mean, worst 23.9% (GB200 NVFP4 Llama 3 70B, predicted too fast; docs/published-runs.md)
    checks, _ = check_published(data_dir / "nemo_dense_archive.csv")
    total = overall_error(checks)
    assert total.mean_abs_error <= 0.085 and total.worst_abs_error <= 0.26, total
    mxfp8 = overall_error([c for c in checks if c.run.workload.dtype == "mxfp8"])
    assert mxfp8.mean_abs_error <= 0.04, mxfp8
