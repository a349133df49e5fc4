"""What the serving simulation does at a fixed-rate row's load: per request rate, the mean decode
batch, TTFT and TPOT (mean and p99) and output tokens/s of one replica; and, with ``--host-ms``, the
same at the row's rate with that much host time added to every step (Schedule.step_host_s). A
diagnostic of where a latency row's error comes from (the step curve near capacity), not a fit: the
model's presets are not changed.

    python scripts/serving_rate_probe.py ROW_ID [--csv FILE] [--rates 16,18.75,20] [--host-ms 0,10,20]
                                        [--requests 5000] [--draws 2]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = ROOT.parent / "shared" / "reference" / "serving_runs.csv"


def _runs(case, load, host_s: float, draws: int):
    from autotune.cost.serving_eval import run_serving

    engine = case.deployment.runtime.serving.with_changes(step_host_s=host_s)
    dep = dataclasses.replace(case.deployment, runtime=case.deployment.runtime.with_changes(serving=engine))
    return [run_serving(dep, dataclasses.replace(load, seed=load.seed + k)) for k in range(draws)]


def _line(label: str, runs) -> str:
    from autotune.cost.serving_load import metric_value

    def mean(metric: str, scale: float = 1e3) -> float:
        return sum(metric_value(r.trace, metric) for r in runs) / len(runs) * scale

    running = sum(r.trace.mean_running for r in runs) / len(runs)
    return (f"{label:<22} running {running:6.0f}  TTFT {mean('ttft_mean'):7.0f} ms (p99 {mean('ttft_p99'):7.0f})  "
            f"TPOT {mean('tpot_mean'):6.1f} ms (p99 {mean('tpot_p99'):6.1f})  {mean('output_tokens_per_s', 1.0):7.0f} tok/s")


def main(argv: list[str] | None = None) -> int:
    from autotune.calibrate.serving_rows import RowProblem, case_from_row

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row")
    parser.add_argument("--csv", default=str(DEFAULT_CSV))
    parser.add_argument("--rates", default="", help="requests/s per replica, comma-separated (default: the row's)")
    parser.add_argument("--host-ms", default="", help="host ms added to every step at the row's rate, comma-separated")
    parser.add_argument("--requests", type=int, default=5000, help="requests per replica simulated (at most the row's)")
    parser.add_argument("--draws", type=int, default=2, help="Poisson arrival draws averaged")
    args = parser.parse_args(argv)
    rows = {r["id"]: r for r in csv.DictReader(open(args.csv, newline=""))}
    if args.row not in rows:
        print(f"error: no row {args.row!r} in {args.csv}", file=sys.stderr)
        return 2
    try:
        case = case_from_row(rows[args.row])
    except RowProblem as err:
        print(f"error: {args.row}: {err}", file=sys.stderr)
        return 2
    if case.load.kind != "rate":
        print(f"error: {args.row} is not a fixed-rate row ({case.load.kind})", file=sys.stderr)
        return 2
    load = dataclasses.replace(case.load, num_requests=min(args.requests, case.load.num_requests))
    print(f"{args.row}: {case.metric} measured {case.measured * case.unit_to_si * 1e3:.1f} ms; "
          f"{case.load.rate_per_s:g} requests/s per replica, {load.num_requests} requests, {args.draws} draws")
    for rate in [float(x) for x in args.rates.split(",") if x]:
        print(_line(f"rate {rate:g}/s", _runs(case, dataclasses.replace(load, rate_per_s=rate), 0.0, args.draws)))
    for host_ms in [float(x) for x in args.host_ms.split(",") if x]:
        print(_line(f"+{host_ms:g} ms a step", _runs(case, load, host_ms / 1e3, args.draws)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
