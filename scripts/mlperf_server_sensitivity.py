"""Where an MLPerf Server latency error comes from: the kernels' speed or the load and harness model.

For each MLPerf Server ``tpot_mean`` row of a serving CSV with an Offline throughput row of the same
model, GPU, GPU count and MLPerf round, prints (per instance):

* measured: Server and Offline output tokens/s, their ratio (how close to capacity the Server run
  sits), the mean TPOT and, by Little's law, the requests decoding at once (tokens/s x TPOT: each
  decoding request gets one token a step);
* predicted, as autotune check-published simulates the rows (one Poisson draw, seed 0);
* predicted again with every GPU cost of the step scaled by s*, the factor that makes the predicted
  Offline throughput equal the measured one (the TensorRT-LLM presets have no host time, so scaling
  every kernel by s stretches the whole Offline run by s: its throughput moves by exactly 1 / s).

If the TPOT at s* is near the measured one, the Server error is the kernels' (a few percent of
per-token cost, amplified near saturation: the batch settles where tokens/s x step(batch) = batch,
i.e. batch = rate x a / (1 - rate x c) for step = a + c x batch); if it stays far, the load or the
harness is modelled wrong. A figure-printing benchmark, not a test: it simulates a few minutes.

    PYTHONPATH=. python scripts/mlperf_server_sensitivity.py tests/data/serving_runs.csv [more.csv ...]
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import serving_eval
from autotune.cost.serving_load import metric_value
from autotune.spec.json_file import read_csv_file


_ROWS: list[dict] = []  # every row read (a Server run's TTFT row is looked up beside its TPOT row)


def _scaled(step, s: float):
    """The step model with every GPU cost scaled by ``s`` (a uniformly slower or faster kernel set)."""
    def times(a):
        return None if a is None else np.asarray(a) * s
    return replace(step, linear_s=times(step.linear_s), head_s=times(step.head_s), decode_lat_s=step.decode_lat_s * s,
                   decode_s_per_position=step.decode_s_per_position * s,
                   decode_s_per_request=step.decode_s_per_request * s, prefill_lat_s=step.prefill_lat_s * s,
                   prefill_s_per_pair=step.prefill_s_per_pair * s, rank_linear_s=times(step.rank_linear_s),
                   exchange_s=times(step.exchange_s))


def _run(case, s: float = 1.0):
    """One simulated run of the row's load on one replica, kernels scaled by ``s``."""
    original = serving_eval.replica_step_model
    serving_eval.replica_step_model = lambda dep, **kw: _scaled(original(dep, **kw), s)
    try:
        return serving_eval.run_serving(case.deployment, case.load).trace
    finally:
        serving_eval.replica_step_model = original


def _key(row: dict) -> tuple:
    round_ = row["engine_version"].split(" NVIDIA")[0]  # "MLPerf v4.1"
    # v5.0 names the interactive run a benchmark of its own (llama2-70b-interactive): the same model and Offline row
    return row["model"].replace("-interactive", ""), row["gpu"], row["gpus"], round_


def _scenario(row: dict) -> str:
    text = row["concurrency_or_batch"].lower()
    return "offline" if "offline" in text else ("server" if "server" in text or "interactive" in text else "")


def _qps(row: dict) -> str:
    found = re.search(r"target_qps=([0-9.]+)", row["concurrency_or_batch"])
    return found.group(1) if found else ""


def _step_at(case, batch: float) -> float | None:
    """The model's GPU seconds of one steady-state step holding ``batch`` decoding requests: their
    decodes over half-generated contexts, plus the prompts that arrive per output token (batch x
    input / output mean tokens, whole prompts of the mean length); None past the engine's token budget."""
    isl, osl = case.load.input_len, case.load.output_len
    step = serving_eval.run_serving(case.deployment, replace(case.load, num_requests=1)).step
    prompts = batch / osl
    if round(batch) + round(prompts * isl) > step.max_tokens:
        return None
    return step.gpu_s(decodes=round(batch), context=batch * (isl + osl / 2.0), prefill_tokens=round(prompts * isl),
                      pairs=prompts * isl * (isl + 1) / 2.0, sampled=round(batch + prompts))


def _pairs(rows: list[dict]) -> list[tuple[dict, dict, dict]]:
    """(Server tpot row, Server throughput row, Offline throughput row) of one system."""
    found = []
    for tpot in rows:
        if tpot["engine"] != "mlperf-nvidia" or tpot["metric"] != "tpot_mean" or _scenario(tpot) != "server":
            continue
        same = [r for r in rows if _key(r) == _key(tpot) and r["metric"] == "output_tokens_per_s"]
        server = [r for r in same if _scenario(r) == "server" and _qps(r) == _qps(tpot)]
        offline = [r for r in same if _scenario(r) == "offline"]
        if server and offline:
            found.append((tpot, server[0], offline[0]))
    return found


def _measured_ttft_s(tpot_row: dict, unit_to_si: float) -> float:
    ttft = next(r for r in _ROWS if r["id"] != tpot_row["id"] and _key(r) == _key(tpot_row)
                and r["metric"] == "ttft_mean" and _qps(r) == _qps(tpot_row))
    return float(ttft["value"]) * unit_to_si


def _model_lines(tpot_case, off_case, meas: dict) -> list[str]:
    """The simulated Server run as priced, with the kernels scaled to the measured Offline (s*) and to
    the measured step at the measured batch (s_op)."""
    off = _run(off_case)
    pred_off = float(off.output_len.sum()) / off.duration_s * off_case.deployment.replicas  # the system's
    scales = [("predicted", 1.0), (f"at s*={pred_off / meas['offline']:.3f}", pred_off / meas["offline"])]
    at_batch = _step_at(tpot_case, meas["batch"])
    if at_batch:
        scales.append((f"at s_op={meas['tpot'] / at_batch:.3f}", meas["tpot"] / at_batch))
    lines = [f"  the model's step at the measured batch ({meas['batch']:.0f} decoding + prompts): " + (
        f"{1e3 * at_batch:.1f} ms (measured TPOT {1e3 * meas['tpot']:.1f} ms)" if at_batch else "past the token budget")]
    for label, s in scales:
        trace = _run(tpot_case, s)
        tpot, srv = metric_value(trace, "tpot_mean"), metric_value(trace, "output_tokens_per_s")
        system = srv * tpot_case.deployment.replicas
        lines.append(f"  {label:9s}: server {srv:7.0f} tok/s an instance  system / offline {system * s / pred_off:.3f}  "
                     f"TPOT {1e3 * tpot:6.1f} ms  decoding ~{srv * tpot:5.0f}  "
                     f"(TPOT error {100 * (tpot / meas['tpot'] - 1):+.0f}%, TTFT {1e3 * metric_value(trace, 'ttft_mean'):.0f} ms)")
    return lines


def report(tpot_row: dict, server_row: dict, offline_row: dict) -> str:
    tpot_case, off_case = case_from_row(tpot_row), case_from_row(offline_row)
    replicas = tpot_case.deployment.replicas
    tpot = float(tpot_row["value"]) * tpot_case.unit_to_si
    server = float(server_row["value"])  # whole-system throughputs: the two runs' instances may differ
    meas = dict(tpot=tpot, offline=float(offline_row["value"]), batch=server / replicas * tpot)
    lines = [f"{tpot_row['id']} {tpot_row['model'].split(' (')[0]} {tpot_row['gpu']} x{tpot_row['gpus']} "
             f"({replicas} instances of TP {tpot_case.deployment.tp}, {tpot_case.load.rate_per_s:.3g} req/s each)",
             f"  measured : server {server / replicas:7.0f} tok/s an instance  system / offline {server / meas['offline']:.3f}  "
             f"TPOT {1e3 * tpot:6.1f} ms  decoding ~{meas['batch']:5.0f}  "
             f"TTFT {1e3 * _measured_ttft_s(tpot_row, tpot_case.unit_to_si):.0f} ms"]
    return "\n".join(lines + _model_lines(tpot_case, off_case, meas))


def main(paths: list[str]) -> None:
    rows = [row for path in paths for row in read_csv_file(path, "csv")[1]]
    _ROWS[:] = rows
    for triple in _pairs(rows):
        print(report(*triple), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["tests/data/serving_runs.csv"])
