"""What the ``priced_rows`` fixture (tests/conftest.py) relies on to price a row once per module: a row's
check is the same whether it is priced alone or beside other rows, and again in a later call (arrival
draws are seeded); and a row a test changes is priced afresh, not served from what was kept."""

from __future__ import annotations

import csv
from pathlib import Path

from autotune.calibrate.serving_published import check_serving_rows
from conftest import PricedRows

DATA = Path(__file__).parent / "data" / "serving_runs.csv"
# a Poisson-rate run's TTFT and ITL (one shared simulation) and a trtllm-bench max-throughput row: quick to price
IDS = ("trtsrv-005", "trtsrv-006", "trt017-013")


def _rows() -> list[dict]:
    with open(DATA, newline="") as handle:
        rows = {r["id"]: r for r in csv.DictReader(handle)}
    return [rows[i] for i in IDS]


def test_a_rows_check_does_not_depend_on_the_call_or_its_neighbours():
    rows = _rows()
    together = check_serving_rows(rows)
    alone = [check_serving_rows([row])[0] for row in rows]
    assert all(c.error_pct is not None for c in together), [c.reason for c in together]
    assert together == alone
    assert check_serving_rows(rows[::-1]) == together[::-1]


def test_kept_checks_are_the_rows_own_and_a_changed_row_is_priced_again():
    priced, rows = PricedRows(), _rows()
    (first,) = priced(rows[2:])
    assert priced(rows) == check_serving_rows(rows)
    assert priced(rows[2:])[0] is first  # kept, not simulated again
    changed = dict(rows[2], isl="256")  # trtllm-bench's 128-token prompts, twice as long
    (check,) = priced([changed])
    assert check == check_serving_rows([changed])[0] and check.predicted != first.predicted
