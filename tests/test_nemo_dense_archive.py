"""Megatron-Bridge's other dense Llama 3 pre-training rows (tests/data/nemo_dense_archive.csv, built by
scripts/nemo_dense_archive.py from the performance tables of releases 25.11-26.06): rows the model
was never compared with before they were added, priced with the same NeMo defaults as the given rows."""

import csv
import math

from autotune.calibrate.published import check_published
from autotune.calibrate.regimes import overall_error

LAYOUT = ("source", "model", "gpus", "precision", "global_batch", "micro_batch", "tp", "pp", "cp", "vpp")


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_row_is_priced_and_none_repeats_a_given_row(data_dir):
    rows = _rows(data_dir / "nemo_dense_archive.csv")
    checks, skipped = check_published(data_dir / "nemo_dense_archive.csv")
    assert not skipped, [(s.run_id, s.reason) for s in skipped]
    assert {c.run.run_id for c in checks} == {r["id"] for r in rows}
    assert all(math.isfinite(c.estimate.step_time_s) and c.estimate.step_time_s > 0 for c in checks)
    given = {tuple(r[k] for k in LAYOUT) for r in _rows(data_dir / "modern_runs.csv")}
    assert not given & {tuple(r[k] for k in LAYOUT) for r in rows}


def test_archive_accuracy(data_dir):
    # 34 rows at 7.6% mean, worst 23.9% (GB200 NVFP4 Llama 3 70B, predicted too fast; docs/published-runs.md)
    checks, _ = check_published(data_dir / "nemo_dense_archive.csv")
    total = overall_error(checks)
    assert total.mean_abs_error <= 0.085 and total.worst_abs_error <= 0.26, total
    mxfp8 = overall_error([c for c in checks if c.run.workload.dtype == "mxfp8"])
    assert mxfp8.mean_abs_error <= 0.04, mxfp8
