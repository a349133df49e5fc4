"""InferenceX's B300 DeepSeek-R1 NVFP4 rows (tests/data/inferencex_b300_check.csv) run as their recipe launches
and loads SGLang: `--scheduler-recv-interval` 10 below concurrency 16 and 30 from 16, and the client's
`--random-range-ratio 0.8` (benchmarks/single_node/dsr1_fp4_b300.sh @9ebeafb4e..@ed5867f9e; benchmark-tmpl.yml
@e92a9bf97). Without them the rows' requests return in lock step and never wait for a poll (docs/serving.md,
sglttft44)."""

from __future__ import annotations

import csv
from pathlib import Path

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving

ROWS = Path(__file__).parent / "data" / "inferencex_b300_check.csv"


def _rows() -> dict[str, dict]:
    with ROWS.open(newline="") as handle:
        return {r["id"]: r for r in csv.DictReader(handle)}


def test_every_b300_row_takes_the_recipes_poll_interval_and_spread_lengths():
    for row in _rows().values():
        case = case_from_row(row)
        concurrency = int(row["concurrency_or_batch"].split()[-1])
        assert case.deployment.runtime.serving.scheduler_recv_interval == (30 if concurrency >= 16 else 10), row["id"]
        assert case.load.lengths is not None and case.load.lengths.input_tokens == (819.0, 1024.0), row["id"]


def test_a_b300_arrival_under_load_waits_for_the_poll():
    """Concurrency 1 finds the scheduler idle (it polls at once); at concurrency 4 an arrival comes while the
    others decode and waits for the 10th decode step since the last poll: a few decode steps more on average."""
    rows = _rows()
    idle, loaded = (run_serving(c.deployment, c.load) for c in map(case_from_row, (rows["ixb300-005"], rows["ixb300-017"])))
    decode_s = float(idle.trace.tpot_s.mean())
    assert loaded.trace.ttft_s.mean() - idle.trace.ttft_s.mean() > 2 * decode_s
