"""Shared checks of the out-of-sample row files (tests/data/*_archive.csv): every row is priced."""

import csv
import math

from autotune.calibrate.published import check_published


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def priced_checks(path):
    """check_published over the file, asserting no row was set aside and every step time is finite."""
    checks, skipped = check_published(path)
    assert not skipped, [(s.run_id, s.reason) for s in skipped]
    assert {c.run.run_id for c in checks} == {r["id"] for r in read_rows(path)}
    assert all(math.isfinite(c.estimate.step_time_s) and c.estimate.step_time_s > 0 for c in checks)
    return checks
