"""scripts/diag_vllm06_ttft.py types the SGLang-vs-vLLM 0.6.0 README's medians that are not check rows beside
those that are; the ones that are must be serving_runs.csv's values, so a typo in the table shows up here."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMN = {"ttft_median": 0, "tpot_median": 1, "itl_median": 2}


def _script():
    spec = importlib.util.spec_from_file_location("diag_vllm06_ttft", ROOT / "scripts" / "diag_vllm06_ttft.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_scripts_table_holds_the_check_rows_values():
    published = _script().PUBLISHED
    with open(ROOT / "tests" / "data" / "serving_runs.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["id"].startswith("sgl060") and r["metric"] in COLUMN]
    assert len(rows) == 16  # 8 TTFT, 4 TPOT, 4 ITL (the A100 rows are TTFT only)
    for row in rows:
        rate = int(row["concurrency_or_batch"].split()[2])
        assert published[(row["engine"], row["gpu"], rate)][COLUMN[row["metric"]]] == float(row["value"]), row["id"]


def test_the_rate_rows_are_the_four_loads_of_each_engine():
    rows = _script()._rate_rows()
    loads = sorted((r["engine"], r["gpu"], r["concurrency_or_batch"].split()[2]) for r in rows)
    assert loads == sorted((e, g, str(rate)) for e in ("sglang", "vllm") for g in ("A100-80GB", "H100-80GB")
                           for rate in (4, 8))
