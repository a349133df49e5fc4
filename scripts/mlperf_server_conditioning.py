"""How ill-conditioned an MLPerf Server row's latency is, and what it reads with the capacity priced right.

NVIDIA runs an MLPerf Server (or Interactive) benchmark at a target QPS a few percent under its engine's
capacity. With a step of a + b tokens and the tokens a step holds = rate x length x step (Little's law), a
step lasts a / (1 - rho), rho = rate x length x b, so 1% of capacity moves the TPOT by rho / (1 - rho) %
(cost/serving_capacity.py). For each Server run of the CSVs with an Offline run of the same system (the
results folder's system, the model and the MLPerf round) this prints, from the CSVs and a check-published
JSON of each file (``--json-dir``: DIR/<csv stem>.json):

* rho measured: the Server run's output tokens/s over the Offline run's (the Offline engine may be built
  with other batch limits: a proxy of the Server engine's capacity), and its rho / (1 - rho);
* the priced Offline error (the model's capacity error, as near as the Offline engine stands for it), the
  priced load of the Server run (the JSON's ``priced_load`` where it has one) and the Server throughput error;
* measured and priced mean TPOT and TTFT, and the capacity error band within which the TPOT lands within
  20% (the step a / (1 - rho k), k the capacity's error factor: k = (1 - (1 - rho) / (1 +- 0.2)) / rho).

``--oracle`` (a what-if, never a prediction): every GPU cost of the step scaled by s = priced / measured
Offline output tokens/s, so the model's Offline run (no host time in the MLPerf presets: its throughput moves
by exactly 1 / s, printed as a check) reads the measured one; the Server run re-priced as check-published
prices it (the mean over its Poisson draws), and the latency MAE before and after.

    PYTHONPATH=. python scripts/mlperf_server_conditioning.py --json-dir /tmp/m6 [--oracle] \\
        tests/data/serving_runs.csv tests/data/mlperf_v5_0_nvidia.csv tests/data/mlperf_v5_1_nvidia.csv \\
        tests/data/mlperf_v5_1_gb300.csv
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from statistics import mean, median

import numpy as np

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import serving_eval
from autotune.cost.serving_capacity import budget_capacity
from autotune.cost.serving_step import StepModel
from autotune.spec.json_file import read_csv_file

LATENCY = ("ttft_mean", "tpot_mean")
TOLERANCE = 0.20  # issue 31's latency target
MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # the rows' latency units


@dataclass(frozen=True, kw_only=True, eq=False)
class _ScaledStep(StepModel):
    """A step model whose every GPU second is ``scale`` times the priced one (the simulator reads only gpu_s)."""

    scale: float = 1.0

    def gpu_s(self, **kwargs) -> float:
        return self.scale * super().gpu_s(**kwargs)


@dataclass(frozen=True, kw_only=True)
class Pair:
    """One Server (or Interactive) run's rows by metric and its system's Offline throughput row."""

    file: str
    server: dict
    offline: dict


def _path(row: dict) -> str:
    return row["source"].split(" @")[0]


def _system(row: dict) -> str:
    path = _path(row)
    return path.split("/results/")[1].split("/")[0] if "/results/" in path else ""


def _scenario(row: dict) -> str:
    """Offline, Server or Interactive (v5.0 names its interactive run a benchmark of its own: a Server folder)."""
    scenario = _path(row).split("/performance/")[0].rsplit("/", 1)[-1]
    return "Interactive" if scenario == "Server" and "-interactive" in row["model"] else scenario


def _round(row: dict) -> str:
    return row["engine_version"].split(" NVIDIA")[0]  # "MLPerf v5.0"


def _pairs(file: str, rows: list[dict]) -> list[Pair]:
    """Server runs with a throughput and a latency row, each with its system's Offline output tokens/s row."""
    runs: dict[str, dict] = {}
    for row in rows:
        if row["engine"] == "mlperf-nvidia" and _scenario(row) in ("Server", "Interactive"):
            runs.setdefault(_path(row), {})[row["metric"]] = row
    found = []
    for metrics in runs.values():
        first = next(iter(metrics.values()))
        model = first["model"].replace("-interactive", "")
        offline = [r for r in rows if r["engine"] == "mlperf-nvidia" and _scenario(r) == "Offline"
                   and _system(r) == _system(first) and _round(r) == _round(first) and r["model"] == model
                   and r["metric"] == "output_tokens_per_s"]
        if offline and "output_tokens_per_s" in metrics and any(m in metrics for m in LATENCY):
            found.append(Pair(file=file, server=metrics, offline=offline[0]))
    return found


def capacity_band_pct(rho: float, tolerance: float = TOLERANCE) -> tuple[float, float]:
    """The priced capacity's error (%) within which a step a / (1 - rho) stays within ``tolerance``: capacity
    low by the first (latency + tolerance), high by the second (latency - tolerance)."""
    # step ratio (1 - rho) / (1 - rho k), k = priced / true per-token cost = 1 / (1 + capacity error)
    low = (1.0 - (1.0 - rho) / (1.0 + tolerance)) / rho
    high = (1.0 - (1.0 - rho) / (1.0 - tolerance)) / rho
    return 100.0 * (1.0 / low - 1.0), 100.0 * (1.0 / high - 1.0)


def _err(pred: dict, row: dict | None) -> str:
    if row is None or row["id"] not in pred or pred[row["id"]]["error_pct"] is None:
        return "      -"
    return f"{pred[row['id']]['error_pct']:+6.0f}%"


def _latency(pred: dict, row: dict | None) -> str:
    if row is None:
        return f"{'-':>22s}"
    got, ms = pred.get(row["id"], {}).get("predicted"), MS_PER_UNIT[row["unit"]]
    return f"{float(row['value']) * ms:8.1f} {got * ms if got is not None else float('nan'):8.1f} {_err(pred, row)}"


def pair_line(pair: Pair, pred: dict) -> str:
    """One pair's measured rho and conditioning, priced errors, latencies and the capacity band for 20%."""
    srv, off = pair.server, pair.offline
    rho = float(srv["output_tokens_per_s"]["value"]) / float(off["value"])
    amp = f"{rho / (1 - rho):6.1f}" if rho < 1 else "   sat"
    band = "   (above Offline)" if rho >= 1 else "{:+5.1f}% .. {:+5.1f}%".format(*capacity_band_pct(rho))
    load = pred.get(srv["output_tokens_per_s"]["id"], {}).get("priced_load")
    ids = "/".join(srv[m]["id"].split("-")[-1] for m in ("output_tokens_per_s", *LATENCY) if m in srv)
    name = f"{srv['output_tokens_per_s']['id'].split('-')[0]}-{ids} {_system(off)[:28]} {off['model'].split(' (')[0][:16]}"
    return (f"{name:64s} {_scenario(srv['output_tokens_per_s'])[:5]:5s} {rho:6.3f} {amp} {_err(pred, off)} "
            f"{'%6.3f' % load if load is not None else '     -'} {_err(pred, srv['output_tokens_per_s'])} "
            f"{_latency(pred, srv.get('tpot_mean'))} {_latency(pred, srv.get('ttft_mean'))}  {band}")


HEADER = (f"{'Server run (throughput/TPOT/TTFT ids), system, model':64s} {'scen':5s} {'rho':>6s} {'amp':>6s} "
          f"{'Offl':>7s} {'load':>6s} {'Srv':>7s} {'TPOT ms meas / pred / err':>24s} {'TTFT ms meas / pred / err':>24s}"
          f"  capacity band for TPOT within 20%")


def operating_point(pair: Pair) -> dict:
    """The Server run's measured operating point a stream (Little's law: decodes = output tokens/s x TPOT, prompt
    tokens a step = rate x mean prompt x TPOT), the (current, possibly scaled) priced step there, and the priced
    budget-full capacity of the Server engine and of the Offline engine, in system output tokens/s."""
    srv = pair.server
    case = case_from_row(srv["tpot_mean"])
    dep, load = case.deployment, case.load
    run = serving_eval.run_serving(dep, replace(load, num_requests=1))
    isl, osl, streams = float(load.input_len), float(load.output_len), dep.replicas * dep.pp
    tpot = float(srv["tpot_mean"]["value"]) * case.unit_to_si
    decodes = float(srv["output_tokens_per_s"]["value"]) / streams * tpot
    prompt = float(load.rate_per_s) * isl * tpot
    # a decode half way through its output; prompts chunked at mean depth, (isl + 1) / 2 pairs a token (serving_capacity)
    step = run.step.gpu_s(decodes=round(decodes), context=decodes * (isl + osl / 2.0), prefill_tokens=round(prompt),
                          pairs=prompt * (isl + 1.0) / 2.0, sampled=round(decodes + prompt / isl))
    cap = budget_capacity(run.step, run.limits, isl, osl)
    off_case = case_from_row(pair.offline)
    off_run = serving_eval.run_serving(off_case.deployment, replace(off_case.load, num_requests=1))
    off_cap = budget_capacity(off_run.step, off_run.limits, off_case.load.input_len, off_case.load.output_len)
    off_streams = off_case.deployment.replicas * off_case.deployment.pp
    return dict(decodes=decodes, prompt=prompt, tpot_ms=1e3 * tpot, step_ms=1e3 * step,
                server_cap=cap.requests_per_s * osl * streams, server_cap_decodes=cap.decodes,
                offline_cap=off_cap.requests_per_s * off_case.load.output_len * off_streams,
                offline_cap_decodes=off_cap.decodes)


def output_factor(pair: Pair) -> float:
    """The Server run's own mean output a query over the priced one: measured output tokens/s over target QPS x the
    dataset's mean output (NVIDIA's runs stop short of the reference answers: docs/serving.md, 274 vs 294.45)."""
    case = case_from_row(pair.server["output_tokens_per_s"])
    load = case.load
    mean_out = load.lengths.mean_output_tokens if load.lengths is not None else float(load.output_len)
    qps = load.rate_per_s * case.deployment.replicas * case.deployment.pp  # a rate load is a pipeline stream's
    return float(pair.server["output_tokens_per_s"]["value"]) / (qps * mean_out)


def oracle(pair: Pair, scale: float, outputs: float = 1.0) -> tuple[dict, dict]:
    """The pair's Server rows and its Offline row re-priced with every GPU cost scaled by ``scale`` (and a rate run's
    drawn outputs by ``outputs``: output_factor), and the Server run's operating point (operating_point) at that scale."""
    original, draw = serving_eval.replica_step_model, serving_eval.requests_for

    def drawn(load):
        sent = draw(load)
        if load.kind != "rate" or outputs == 1.0:
            return sent
        return replace(sent, output_len=np.maximum(1, np.rint(sent.output_len * outputs)).astype(sent.output_len.dtype))

    def scaled(dep, **kw):
        step = original(dep, **kw)
        return _ScaledStep(**{f.name: getattr(step, f.name) for f in fields(step)}, scale=scale)

    serving_eval.replica_step_model, serving_eval.requests_for = scaled, drawn
    try:
        checks = check_serving_rows([pair.offline, *pair.server.values()])
        point = operating_point(pair) if "tpot_mean" in pair.server else {}
    finally:
        serving_eval.replica_step_model, serving_eval.requests_for = original, draw
    return {c.row_id: dict(error_pct=c.error_pct, predicted=c.predicted, priced_load=c.priced_load) for c in checks}, point


def _point_cells(point: dict, measured_offline: float) -> str:
    if not point:
        return ""
    return (f"  N {point['decodes']:5.0f}+{point['prompt']:5.0f}p step@N {point['step_ms']:6.1f} / TPOT {point['tpot_ms']:6.1f} ms"
            f"  cap Srv {point['server_cap'] / measured_offline:5.3f} ({point['server_cap_decodes']:4.0f} dec)"
            f" Off {point['offline_cap'] / measured_offline:5.3f} ({point['offline_cap_decodes']:4.0f} dec)")


def _mae(values: list[float]) -> str:
    return f"MAE {mean(abs(v) for v in values):6.1f}% median {median(abs(v) for v in values):5.1f}% (n={len(values)})" \
        if values else "no rows"


def _latency_cells(pair: Pair, got: dict, errors: dict, key: str) -> str:
    cells = []
    for metric in LATENCY:
        row = pair.server.get(metric)
        if row is None or got[row["id"]]["error_pct"] is None:
            cells.append(f"{'-':>15s}")
            continue
        errors.setdefault((key, pair.file), []).append(got[row["id"]]["error_pct"])
        cells.append(f"{got[row['id']]['predicted'] * MS_PER_UNIT[row['unit']]:8.1f} {got[row['id']]['error_pct']:+5.0f}%")
    return " ".join(cells)


def oracle_line(pair: Pair, pred: dict, errors: dict, outputs: bool = False) -> str:
    """Oracle 1 (s* = priced / measured Offline) and oracle 2 (s_op: the priced step at the measured operating point
    equal to the measured TPOT, from oracle 1's point), each with the Server run's priced load and latencies."""
    off = pred[pair.offline["id"]]
    s_star = off["predicted"] / off["measured"]
    thr_id = pair.server["output_tokens_per_s"]["id"]
    _latency_cells(pair, pred, errors, "priced")
    got, point = oracle(pair, s_star)
    line = (f"{thr_id:12s} {_system(pair.offline)[:27]:27s} s* {s_star:5.3f} Offl {got[pair.offline['id']]['error_pct']:+5.1f}% "
            f"load {got[thr_id]['priced_load'] or float('nan'):5.3f} {_latency_cells(pair, got, errors, 's*')}")
    if point:
        s_op = s_star * point["tpot_ms"] / point["step_ms"]
        got_op, _ = oracle(pair, s_op)
        line += (f" | s_op {s_op:5.3f} Offl {got_op[pair.offline['id']]['error_pct']:+5.1f}% load "
                 f"{got_op[thr_id]['priced_load'] or float('nan'):5.3f} {_latency_cells(pair, got_op, errors, 's_op')}")
    if outputs and point:
        factor = output_factor(pair)
        got_out, _ = oracle(pair, s_op, factor)
        line += (f" | s_op outputs x{factor:5.3f} load {got_out[thr_id]['priced_load'] or float('nan'):5.3f} "
                 f"{_latency_cells(pair, got_out, errors, 's_op+out')}")
    return line + _point_cells(point, float(pair.offline["value"]))


def oracle_report(pairs: list[Pair], pred: dict, outputs: bool = False) -> None:
    """Each pair's oracle figures, then the latency MAE as priced and under each oracle, per file and over all."""
    print("\nORACLES (diagnostic only). s*: every GPU cost x priced / measured Offline tokens/s; s_op: x measured TPOT /"
          " priced step at the measured operating point. Per oracle: the Offline row's error, the Server run's priced"
          " load, TTFT ms and error, TPOT ms and error; then the measured operating point a stream (decodes + prompt"
          " tokens a step by Little's law), the priced step there at s*, and the budget-full capacities at s* of the"
          " Server and the Offline engine (x measured Offline tokens/s; decodes a step)")
    errors: dict = {}
    for pair in pairs:
        print(oracle_line(pair, pred, errors, outputs), flush=True)
    files = sorted({file for _, file in errors}, key=lambda f: [p.file for p in pairs].index(f))
    for key in ("priced", "s*", "s_op", "s_op+out")[:4 if outputs else 3]:
        for file in [*files, "all"]:
            values = [v for (k, f), vs in errors.items() if k == key and file in (f, "all") for v in vs]
            print(f"latency {key:7s} {file:22s} {_mae(values)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csvs", nargs="+")
    parser.add_argument("--json-dir", required=True, help="check-published --json of each CSV, as DIR/<stem>.json")
    parser.add_argument("--oracle", action="store_true", help="re-price with the step scaled to the measured Offline")
    parser.add_argument("--outputs", action="store_true",
                        help="also oracle s_op with each rate run's outputs scaled to its measured tokens a query")
    parser.add_argument("--only", nargs="*", default=(), help="Server throughput row ids to keep (default: all)")
    args = parser.parse_args(argv)
    pairs, pred = [], {}
    for csv in args.csvs:
        stem = Path(csv).stem
        pred.update({r["id"]: r for r in json.loads((Path(args.json_dir) / f"{stem}.json").read_text())["rows"]})
        pairs.extend(_pairs(stem, read_csv_file(csv, "csv")[1]))
    if args.only:
        pairs = [p for p in pairs if p.server["output_tokens_per_s"]["id"] in args.only]
    print(HEADER)
    for pair in pairs:
        print(pair_line(pair, pred))
    if args.oracle:
        oracle_report(pairs, pred, args.outputs)


if __name__ == "__main__":
    main()
