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
  mNumInFlightTransactions (mlcommons/inference_results_v4.1 @198fc467 closed/NVIDIA/code/harness/harness_llm).

Join-the-shortest-queue makes each instance's arrivals far more regular than an independent Poisson stream (an
instance that fell behind gets none until the others catch up), so its queue near capacity is shorter. This
script (a diagnostic; check-published is unchanged) re-prices the Server rows with one instance's share of a JSQ
dispatch of the whole system's Poisson stream: the system's queries (N x the replica's, Poisson at N x its rate,
lengths drawn as the replica's are) go one by one to the instance with the fewest in flight (ties to the lowest
index, as std::min_element and Python's min do), each in flight from its arrival for its priced latency: the
row's priced mean TTFT + (output - 1) x priced mean TPOT (the check-published JSON's; an approximation: the
engine's own completions are not fed back); instance 0's queries are simulated. Systems of one instance, and
instances of pp > 1 (several pipeline streams a rate load), keep the Poisson stream.

    PYTHONPATH=. python scripts/mlperf_server_dispatch.py --json-dir /tmp/s45/m1 tests/data/mlperf_v5_0_nvidia.csv
"""

from __future__ import annotations

import argparse
import heapq
import json
from dataclasses import replace
from pathlib import Path
from statistics import mean

import numpy as np

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import serving_eval
from autotune.cost.serving_run import Requests
from autotune.spec.json_file import read_csv_file

LATENCY = ("ttft_mean", "tpot_mean")
S_PER_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def jsq_share(sent: Requests, instances: int, in_flight_s: np.ndarray, instance: int = 0) -> np.ndarray:
    """Indices of the system's requests (``sent``, in arrival order) that join-the-shortest-queue on in-flight
    counts sends to ``instance``, request j in flight from its arrival for ``in_flight_s[j]``."""
    count = np.zeros(instances, dtype=np.int64)
    done: list[tuple[float, int]] = []
    mine = []
    for j, t in enumerate(sent.arrival_s):
        while done and done[0][0] <= t:
            count[heapq.heappop(done)[1]] -= 1
        k = int(np.argmin(count))  # the first minimum, as std::min_element / min() pick
        count[k] += 1
        heapq.heappush(done, (float(t + in_flight_s[j]), k))
        if k == instance:
            mine.append(j)
    return np.asarray(mine, dtype=np.int64)


def jsq_requests(draw, load, instances: int, ttft_s: float, tpot_s: float) -> Requests:
    """One instance's requests under a JSQ dispatch of the whole system's Poisson stream (module docstring)."""
    system = draw(replace(load, num_requests=load.num_requests * instances, rate_per_s=load.rate_per_s * instances))
    idx = jsq_share(system, instances, ttft_s + (system.output_len - 1) * tpot_s)
    arrival = system.arrival_s[idx]
    return Requests(arrival_s=arrival - arrival[0], input_len=system.input_len[idx], output_len=system.output_len[idx])


def _server_runs(rows: list[dict]) -> list[dict]:
    """Server / Interactive rate runs by metric (their throughput and latency rows share a results folder)."""
    runs: dict[str, dict] = {}
    for row in rows:
        if row["engine"] == "mlperf-nvidia" and ("/Server/" in row["source"] or "/Interactive/" in row["source"]):
            runs.setdefault(row["source"].split(" @")[0], {})[row["metric"]] = row
    return [m for m in runs.values() if all(k in m for k in LATENCY)]


def reprice(run: dict, pred: dict) -> dict | None:
    """The run's rows re-priced under the JSQ dispatch, or None where it keeps the Poisson stream."""
    case = case_from_row(run["tpot_mean"])
    dep = case.deployment
    if dep.replicas < 2 or dep.pp > 1 or any(pred[run[m]["id"]]["predicted"] is None for m in LATENCY):
        return None
    ttft_s, tpot_s = (pred[run[m]["id"]]["predicted"] * S_PER_UNIT[run[m]["unit"]] for m in LATENCY)
    checks = _patched(run, dep.replicas, ttft_s, tpot_s, lambda: check_serving_rows(list(run.values())))
    return {c.row_id: dict(error_pct=c.error_pct, predicted=c.predicted) for c in checks}


def _patched(run: dict, instances: int, ttft_s: float, tpot_s: float, price):
    """``price()`` with serving_eval's requests_for giving rate loads one instance's JSQ share."""
    draw = serving_eval.requests_for

    def dispatched(load):
        return jsq_requests(draw, load, instances, ttft_s, tpot_s) if load.kind == "rate" else draw(load)

    serving_eval.requests_for = dispatched
    try:
        return price()
    finally:
        serving_eval.requests_for = draw


def oracle_pair(pair, pred: dict) -> tuple[dict, dict] | None:
    """mlperf_server_conditioning's oracle s_op with outputs (the step equal to the measured TPOT at the measured
    operating point, the drawn outputs scaled to the run's own): (Poisson, JSQ) re-pricings of the pair, the JSQ
    in flight for the measured mean TTFT + (output - 1) x measured mean TPOT; None where JSQ does not apply."""
    import mlperf_server_conditioning as cond  # noqa: PLC0415 (a sibling script)

    dep = case_from_row(pair.server["tpot_mean"]).deployment
    if dep.replicas < 2 or dep.pp > 1 or "ttft_mean" not in pair.server:
        return None
    off = pred[pair.offline["id"]]
    s_star = off["predicted"] / off["measured"]
    _, point = cond.oracle(pair, s_star)
    s_op, factor = s_star * point["tpot_ms"] / point["step_ms"], cond.output_factor(pair)
    ttft_s, tpot_s = (float(pair.server[m]["value"]) * S_PER_UNIT[pair.server[m]["unit"]] for m in LATENCY)
    poisson, _ = cond.oracle(pair, s_op, factor)
    jsq, _ = _patched(pair.server, dep.replicas, ttft_s, tpot_s, lambda: cond.oracle(pair, s_op, factor))
    return poisson, jsq


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
            print("s_op+out Poisson -> JSQ  " + "  ".join(cells), flush=True)
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
    parser.add_argument("--json-dir", required=True, help="check-published --json of each CSV, as DIR/<stem>.json")
    parser.add_argument("--oracle", action="store_true",
                        help="compare under mlperf_server_conditioning's oracle s_op with outputs instead")
    args = parser.parse_args(argv)
    if args.oracle:
        oracle_main(args.csvs, args.json_dir)
        return
    errors: dict = {}
    for csv in args.csvs:
        stem = Path(csv).stem
        pred = {r["id"]: r for r in json.loads((Path(args.json_dir) / f"{stem}.json").read_text())["rows"]}
        for run in _server_runs(read_csv_file(csv, "csv")[1]):
            got = reprice(run, pred)
            cells = []
            for metric, row in sorted(run.items()):
                before = pred[row["id"]]["error_pct"]
                after = got[row["id"]]["error_pct"] if got else before
                if before is None or after is None:
                    continue
                errors.setdefault((stem, metric), []).append((before, after))
                cells.append(f"{row['id']} {metric} {before:+7.1f}% -> {after:+7.1f}%")
            print(f"{'JSQ' if got else 'same'}  " + "  ".join(cells), flush=True)
    _summary(errors)


if __name__ == "__main__":
    main()
