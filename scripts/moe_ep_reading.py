"""A check file's MoE rows whose ``ep`` cell is blank, priced under both readings of it: the engine's default
(blank: TensorRT-LLM's Mapping puts the experts TP-split, moe_tp = tp, moe_ep 1) and expert parallelism over the
TP group (ep = tp, the DEP columns of the 1.0 page's next revision), with the mean absolute and signed error by
model and GPU. A diagnosis aid for the row reading (issue 31, trtmoe44); it changes no row and no price.

    python scripts/moe_ep_reading.py tests/data/trtllm_1_0_perf_overview.csv
"""

from __future__ import annotations

import sys
from collections import defaultdict

from autotune.calibrate.serving_published import check_serving_rows
from autotune.spec.json_file import read_csv_file


def _errors(rows: list[dict]) -> dict[str, float]:
    return {c.row_id: 100.0 * (c.predicted / c.measured - 1.0) for c in check_serving_rows(rows) if c.predicted}


def main(path: str) -> None:
    rows = [r for r in read_csv_file(path, "runs")[1] if r["arch"] == "moe" and not r["ep"] and int(r["tp"]) > 1]
    blank, spread = _errors(rows), _errors([{**r, "ep": r["tp"]} for r in rows])
    groups = defaultdict(list)
    for r in rows:
        if r["id"] in blank and r["id"] in spread:
            groups[f"{r['model']} {r['gpu']}"].append((blank[r["id"]], spread[r["id"]]))
    print("model GPU (rows): ep blank (moe_tp = tp) | ep = tp   mean abs / mean signed error %")
    for key, pairs in sorted(groups.items()):
        n = len(pairs)
        cells = [(sum(abs(p[i]) for p in pairs) / n, sum(p[i] for p in pairs) / n) for i in (0, 1)]
        print(f"{key} ({n}): " + " | ".join(f"{a:5.1f} / {s:+5.1f}" for a, s in cells))


if __name__ == "__main__":
    main(sys.argv[1])
