"""Published serving results checked against the serving model (``autotune check-published``).

Reads CSVs with the columns of tests/data/serving_runs.csv, prices each row (serving_rows.case_from_row,
then the engine simulated on one replica: autotune/cost/serving_eval.py) and summarises the errors by
engine, GPU and metric. A rate row is priced as the mean over Poisson arrival draws (its expectation;
the benchmark measured one draw). Rows that share a deployment and a load (a run's TTFT, TPOT and
ITL) share the simulations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median

from autotune.calibrate.mlperf_bounds import ServerBounds, server_bounds
from autotune.calibrate.serving_phrases import metric_name, per_user_rate
from autotune.calibrate.serving_rows import COLUMNS, MAX_RATE_REQUESTS, RowProblem, ServingCase, case_from_row
from autotune.cost.serving_capacity import latency_pct_per_capacity_pct, priced_load, saturation_note
from autotune.cost.serving_eval import expected_metric
from autotune.cost.serving_load import METRICS
from autotune.cost.serving_offline import offline_draws
from autotune.cost.serving_phase import phase_tokens_per_gpu_s
from autotune.cost.serving_valid import valid_rate_runs
from autotune.errors import AutotuneError
from autotune.spec.json_file import read_csv_file

__all__ = ["ServingCheck", "GroupError", "is_serving_csv", "check_serving_csv", "check_serving_rows", "summarise",
           "latency_row"]


@dataclass(frozen=True, kw_only=True)
class ServingCheck:
    """One row: what it measured, what autotune predicts (in the row's unit), or why it cannot."""

    row_id: str
    engine: str
    gpu: str
    metric: str
    unit: str
    measured: float | None
    predicted: float | None = None
    reason: str = ""
    runtime: str = ""
    assumed: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # what the simulated run says about its own reading (a saturated queue)
    priced_load: float | None = None  # a rate row's requests/s over its replica's priced capacity (serving_capacity)

    @property
    def latency_pct_per_capacity_pct(self) -> float | None:
        """% its latency falls for 1% more priced capacity, rho / (1 - rho); None saturated or not a rate row."""
        return latency_pct_per_capacity_pct(self.priced_load)

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or not self.measured:
            return None
        return 100.0 * (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict:
        return {"id": self.row_id, "engine": self.engine, "runtime": self.runtime, "gpu": self.gpu,
                "metric": self.metric, "unit": self.unit, "measured": self.measured, "predicted": self.predicted,
                "error_pct": self.error_pct, "reason": self.reason or None, "assumed": list(self.assumed),
                "notes": list(self.notes), "priced_load": self.priced_load,
                "latency_pct_per_capacity_pct": self.latency_pct_per_capacity_pct}


@dataclass(frozen=True, kw_only=True)
class GroupError:
    """Errors of the priced rows of one group (engine, GPU, metric; or coarser)."""

    group: str
    num_rows: int
    mean_abs_error_pct: float
    median_abs_error_pct: float
    mean_signed_error_pct: float
    worst_row: str

    def to_dict(self) -> dict:
        return dict(vars(self))


def is_serving_csv(path: str | Path) -> bool:
    """Whether a CSV has serving_runs.csv's columns (else it is a training-runs CSV)."""
    header, _ = read_csv_file(path, "runs")
    return {"engine", "metric", "value"} <= set(header)


def _predict(case: ServingCase, runs: dict, bounds: ServerBounds | None = None) -> tuple[float, tuple[str, ...], float | None]:
    """The row's predicted value in its unit, the notes of the runs it averages and a rate row's priced load
    (serving_capacity). A latency of a VALID MLPerf Server run (``bounds``) is read within its bounds (serving_valid.py)."""
    dep = case.deployment
    if case.phase is not None:  # one pool of a disaggregated deployment: its step, back to back
        p = case.phase
        return (phase_tokens_per_gpu_s(dep, phase=p.phase, per_rank=p.per_rank, context=p.context, exchange=p.exchange)
                * p.per_gpu_to_unit), (), None
    # the replicas too: the runs carry their deployment, whose replica count scales a system-wide metric
    key = (dep.runtime, dep.model, dep.cluster.name, dep.tp, dep.pp, dep.ep, dep.attention_dp, dep.dtype, dep.replicas,
           dep.speculation, dep.eplb, case.load)
    if key not in runs:  # a rate load: the mean over Poisson draws (serving_eval.ARRIVAL_DRAWS); a long Offline run: its head
        runs[key] = offline_draws(dep, case.load, MAX_RATE_REQUESTS)
    stated = runs[key]
    note = saturation_note(stated[0])  # the draws share the rate, the step model and the limits
    notes = (note,) if note else ()
    if bounds is not None and METRICS[case.metric][0] != "total":
        if (key, bounds) not in runs:
            runs[(key, bounds)] = valid_rate_runs(dep, case.load, stated, ttft_p99_s=bounds.ttft_p99_s,
                                                  tpot_p99_s=bounds.tpot_p99_s)
        stated, valid_rate = runs[(key, bounds)]
        notes += (_valid_note(bounds, case.load.rate_per_s, valid_rate),) if valid_rate is not None else ()
    value = expected_metric(stated, case.metric, scope=case.scope)
    # inverse: a per-user rate, 1 / TPOT
    return (1.0 / value if case.inverse else value) / case.unit_to_si, notes, priced_load(runs[key][0])


def _valid_note(bounds: ServerBounds, rate_per_s: float, valid_rate_per_s: float) -> str:
    return (f"VALID run read within {bounds.benchmark}'s p99 bounds ({bounds.ttft_p99_s:g} s TTFT, "
            f"{1e3 * bounds.tpot_p99_s:g} ms TPOT; {bounds.source}): the priced system is beyond them at the row's "
            f"{rate_per_s:.4g} requests/s a replica, so its latencies are those at {valid_rate_per_s:.4g}, the highest "
            f"rate within them (searched down to a quarter of the row's rate)")


def check_serving_rows(rows: list[dict]) -> list[ServingCheck]:
    """Every row priced, or left with its reason."""
    checks, runs = [], {}
    for number, row in enumerate(rows, start=2):
        row_id = row.get("id") or f"line {number}"
        base = dict(row_id=row_id, engine=row.get("engine", ""), gpu=row.get("gpu", ""), metric=row.get("metric", ""),
                    unit=row.get("unit", ""))
        try:
            base["measured"] = float(row["value"])
        except (KeyError, ValueError):
            checks.append(ServingCheck(**base, measured=None, reason=f"value {row.get('value')!r} is not a number"))
            continue
        try:
            case = case_from_row(row)
            predicted, notes, load = _predict(case, runs, server_bounds(row))
        except RowProblem as err:
            checks.append(ServingCheck(**base, reason=str(err)))
            continue
        except AutotuneError as err:
            checks.append(ServingCheck(**base, reason=f"{err.field}: {err.message}"))
            continue
        base["engine"] = case.engine  # the engine's own name, however the row spells it (summaries group by it)
        checks.append(ServingCheck(**base, predicted=predicted, runtime=case.deployment.runtime.name,
                                   assumed=case.assumed, notes=notes, priced_load=load))
    return checks


def check_serving_csv(path: str | Path) -> list[ServingCheck]:
    """Read a serving CSV (serving_runs.csv's columns) and check every row."""
    fieldnames, rows = read_csv_file(path, "runs")
    missing = [c for c in COLUMNS if c not in fieldnames]
    if missing:
        raise AutotuneError("runs", f"{str(path)!r} lacks the column(s) {', '.join(missing)} "
                                    "(see tests/data/serving_runs.csv for the layout)")
    return check_serving_rows(rows)


def _metric_key(metric: str, unit: str = "") -> str:
    """The metric cell as the row reader names it ('total_token_throughput' -> total_tokens_per_s, 'Mean TPOT
    (ms)' -> tpot_mean), so spellings of one metric group together; a per-user rate or an unread cell as written."""
    try:
        return metric if per_user_rate(metric, unit) else metric_name(metric, unit)
    except RowProblem:
        return metric


def _kind(metric: str, unit: str = "") -> str:
    """Throughput or latency (a per-user token rate is 1 / TPOT: a latency; a one-phase row's input
    tokens/s, serving_phase_rows.py, a throughput)."""
    if per_user_rate(metric, unit):
        return "latency"
    key = _metric_key(metric, unit)
    return "throughput" if METRICS.get(key, ("",))[0] == "total" or key.endswith("tokens_per_s") else "latency"


def latency_row(check: ServingCheck) -> bool:
    """Whether a priced row's metric is a latency (TTFT, TPOT, ITL, E2E or a per-user rate), as summarise groups it."""
    return check.error_pct is not None and _kind(check.metric, check.unit) == "latency"


def summarise(checks: list[ServingCheck], by: str = "engine,gpu,metric") -> list[GroupError]:
    """Errors of the priced rows grouped by the named fields (engine, gpu, metric, kind)."""
    keys = by.split(",")
    groups: dict[str, list[ServingCheck]] = {}
    for check in checks:
        if check.error_pct is None:
            continue
        values = {"engine": check.engine, "gpu": check.gpu, "metric": _metric_key(check.metric, check.unit),
                  "kind": _kind(check.metric, check.unit)}
        groups.setdefault(" | ".join(values[k] for k in keys), []).append(check)
    out = []
    for group, members in sorted(groups.items()):
        errors = [c.error_pct for c in members]
        worst = max(members, key=lambda c: abs(c.error_pct))
        out.append(GroupError(group=group, num_rows=len(members), mean_abs_error_pct=mean(abs(e) for e in errors),
                              median_abs_error_pct=median(abs(e) for e in errors),
                              mean_signed_error_pct=mean(errors), worst_row=worst.row_id))
    return out
