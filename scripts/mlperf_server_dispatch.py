"""What-if: MLPerf Server runs with queries dispatched to the least busy instance, as NVIDIA's harnesses do.

autotune prices a multi-instance system as independent replicas, each fed a Poisson stream at 1 / replicas of the
target QPS (cost/serving_eval.py). NVIDIA's Server harnesses instead send each LoadGen query to the instance with
the fewest queries in flight (enqueued and not completed):

* v5.1 llmlib: code/llmlib/config.py HarnessConfig.__post_init__ sets traffic_distribution_policy
  "load_balancing" for Scenario.Server ("round_robin" for Offline); code/llmlib/factory.py _create_scheduler
  load_balancing() takes the core with the smallest get_num_pending_samples() (cores/base.py: len(pending_samples),
  a query added at enqueue and removed at its completion) (mlcommons/inference_results_v5.1 @965182b03376
  closed/NVIDIA);
* v4.1 harness_llm: main_llm.cc --traffic_distribution_policy default 2 = trafficDistributionPolicy::loadBalancing
  (llm_server.hpp), llm_server.cc LLMServerLoadGen::getLeastBusyIdx: std::min_element over
  mNumInFlightTransactions (mlcommons/inference_results_v4.1 @a2f5d66d17e8 closed/NVIDIA/code/harness/harness_llm).

The mlperf-nvidia presets now price it (server_dispatch = "least_in_flight", autotune/cost/serving_dispatch.py).
This script prints each Server run's rows priced with the independent Poisson shares (serving_eval's dispatch
switched off) and as the presets price them; ``--oracle`` does the same under mlperf_server_conditioning's oracle
s_op with outputs (the step equal to the measured TPOT at the measured operating point, the outputs the run's own).

    PYTHONPATH=. python scripts/mlperf_server_dispatch.py --json-dir DIR [--oracle] tests/data/mlperf_v5_0_nvidia.csv
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean


from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import serving_eval
from autotune.spec.json_file import read_csv_file

LATENCY = ("ttft_mean", "tpot_mean")


def _server_runs(rows: list[dict]) -> list[dict]:
    """Server / Interactive rate runs by metric (their throughput and latency rows share a results folder)."""
    runs: dict[str, dict] = {}
    for row in rows:
        if row["engine"] == "mlperf-nvidia" and ("/Server/" in row["source"] or "/Interactive/" in row["source"]):
            runs.setdefault(row["source"].split(" @")[0], {})[row["metric"]] = row
    return [m for m in runs.values() if all(k in m for k in LATENCY)]


def _independent(price):
    """``price()`` with serving_eval's least-busy dispatch switched off (every replica an independent Poisson share)."""
    dispatch = serving_eval.dispatched_runs
    serving_eval.dispatched_runs = lambda runs, run, draw: runs
    try:
        return price()
    finally:
        serving_eval.dispatched_runs = dispatch


def _applies(run: dict) -> bool:
    dep = case_from_row(run["tpot_mean"]).deployment
    return dep.replicas >= 2 and dep.pp == 1 and dep.runtime.serving.server_dispatch == "least_in_flight"


def reprice(run: dict) -> tuple[dict, dict] | None:
    """The run's rows priced independent and dispatched, or None where the dispatch does not apply."""
    if not _applies(run):
        return None
    rows = list(run.values())
    return tuple({c.row_id: dict(error_pct=c.error_pct, predicted=c.predicted) for c in checks}
                 for checks in (_independent(lambda: check_serving_rows(rows)), check_serving_rows(rows)))


def oracle_pair(pair, pred: dict) -> tuple[dict, dict] | None:
    """mlperf_server_conditioning's oracle s_op with outputs (the step equal to the measured TPOT at the measured
    operating point, the drawn outputs scaled to the run's own), independent and dispatched; None where the dispatch
    does not apply."""
    import mlperf_server_conditioning as cond  # noqa: PLC0415 (a sibling script)

    if "ttft_mean" not in pair.server or not _applies(pair.server):
        return None
    off = pred[pair.offline["id"]]
    s_star = off["predicted"] / off["measured"]
    _, point = _independent(lambda: cond.oracle(pair, s_star))
    s_op, factor = s_star * point["tpot_ms"] / point["step_ms"], cond.output_factor(pair)
    return _independent(lambda: cond.oracle(pair, s_op, factor))[0], cond.oracle(pair, s_op, factor)[0]


def oracle_main(csvs: list[str], json_dir: str) -> None:
    """Each pair's Server latency rows under oracle s_op + outputs, Poisson against JSQ, then the MAE."""
    import mlperf_server_conditioning as cond  # noqa: PLC0415

    errors: dict = {}
    for csv in csvs:
        stem = Path(csv).stem
        pred = {r["id"]: r for r in json.loads((Path(json_dir) / f"{stem}.json").read_text())["rows"]}
        for pair in cond._pairs(stem, read_csv_file(csv, "csv")[1]):
            got = oracle_pair(pair, pred)
            if got is None:
                continue
            cells = []
            for metric in LATENCY:
                rid = pair.server[metric]["id"]
                before, after = got[0][rid]["error_pct"], got[1][rid]["error_pct"]
                errors.setdefault((stem, metric), []).append((before, after))
                cells.append(f"{rid} {metric} {before:+7.1f}% -> {after:+7.1f}%")
            print("s_op+out independent -> least_in_flight  " + "  ".join(cells), flush=True)
    _summary(errors)


def _summary(errors: dict) -> None:
    for (stem, metric), pairs in sorted(errors.items()):
        print(f"{stem:24s} {metric:32s} n={len(pairs):2d} MAE {mean(abs(b) for b, _ in pairs):7.1f}% -> "
              f"{mean(abs(a) for _, a in pairs):7.1f}%")
    for metric in sorted({m for _, m in errors}):
        pairs = [p for (_, m), ps in errors.items() if m == metric for p in ps]
        print(f"{'all':24s} {metric:32s} n={len(pairs):2d} MAE {mean(abs(b) for b, _ in pairs):7.1f}% -> "
              f"{mean(abs(a) for _, a in pairs):7.1f}%")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csvs", nargs="+")
    parser.add_argument("--json-dir", help="--oracle: check-published --json of each CSV (DIR/<stem>.json), the Offline rows")
    parser.add_argument("--oracle", action="store_true",
                        help="compare under mlperf_server_conditioning's oracle s_op with outputs instead")
    args = parser.parse_args(argv)
    if args.oracle:
        oracle_main(args.csvs, args.json_dir)
        return
    errors: dict = {}
    for csv in args.csvs:
        stem = Path(csv).stem
        for run in _server_runs(read_csv_file(csv, "csv")[1]):
            got = reprice(run)
            if got is None:
                continue
            cells = []
            for metric, row in sorted(run.items()):
                before, after = got[0][row["id"]]["error_pct"], got[1][row["id"]]["error_pct"]
                if before is None or after is None:
                    continue
                errors.setdefault((stem, metric), []).append((before, after))
                cells.append(f"{row['id']} {metric} {before:+7.1f}% -> {after:+7.1f}%")
            print("independent -> least_in_flight  " + "  ".join(cells), flush=True)
    _summary(errors)


if __name__ == "__main__":
    main()
