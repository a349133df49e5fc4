"""The given published rows stated as a user states a run (``autotune evaluate --runtime R`` with
the row's own cells, autotune/calibrate/stated_rows.py) against ``check-published``: mean absolute
error per runtime both ways, and the rows whose two predictions differ.

    python scripts/stated_rows.py [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("published_runs.csv", "modern_runs.csv")


def _evaluate(argv: list[str]) -> tuple[float | None, str]:
    from autotune.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code not in (0, 1):
        return None, err.getvalue().strip()
    return json.loads(out.getvalue())["step_time_s"], ""


def compare(data_dir: Path, cells_only: bool = False) -> list[dict]:
    from autotune.calibrate.published import check_published
    from autotune.calibrate.source_flops import derive_iter_s
    from autotune.calibrate.stated_rows import stated_argv

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in FILES:
            checks = {c.run.run_id: c for c in check_published(data_dir / name)[0]}
            table = list(csv.DictReader(open(data_dir / name)))
            for row in table:
                check = checks.get(row["id"])
                if check is None:
                    continue
                if not row.get("iter_s"):  # the cells its TFLOP/s derivation fixes (source_flops.py)
                    row = derive_iter_s(row, table)
                argv = stated_argv(row, Path(tmp), cells_only=cells_only)
                stated, why = _evaluate(argv) if isinstance(argv, list) else (None, argv)
                out.append({"id": row["id"], "runtime": argv[argv.index("--runtime") + 1] if isinstance(argv, list) else "",
                            "measured_s": check.run.iter_s, "published_check_s": check.estimate.step_time_s,
                            "stated_s": stated, "why": why})
    return out


def _errors(rows: list[dict], key: str) -> list[float]:
    return [abs(r[key] / r["measured_s"] - 1) for r in rows if r[key] is not None]


def _mae(values: list[float]) -> str:
    return f"{100 * statistics.mean(values):.1f}%" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cells-only", action="store_true",
                        help="state each row by its columns alone (no settings from its source's text or NeMo recipe)")
    args = parser.parse_args()
    rows = compare(ROOT / "tests" / "data", cells_only=args.cells_only)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'runtime':16s} {'rows':>5s} {'check-published':>16s} {'as stated':>10s} {'stated p90':>10s}")
    for runtime in sorted({r["runtime"] for r in rows}) + ["all"]:
        group = [r for r in rows if runtime in ("all", r["runtime"])]
        stated = sorted(_errors(group, "stated_s"))
        p90 = f"{100 * stated[int(0.9 * (len(stated) - 1))]:.1f}%" if stated else "-"
        print(f"{runtime:16s} {len(group):5d} {_mae(_errors(group, 'published_check_s')):>16s} {_mae(stated):>10s} {p90:>10s}")
    differ = [r for r in rows if r["stated_s"] is None or abs(r["stated_s"] / r["published_check_s"] - 1) > 1e-9]
    print(f"\n{len(differ)} of {len(rows)} rows priced differently when stated:")
    for r in differ:
        gap = f"{100 * (r['stated_s'] / r['published_check_s'] - 1):+.1f}%" if r["stated_s"] else r["why"]
        print(f"  {r['id']:24s} {r['runtime']:14s} {gap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
