"""Predicted beside measured: one :class:`PlanResult` per plan, summary errors, JSON and table.

Measured step time is the median over the timed steps of the slowest rank's time (each step
sits between two barriers). Measured peak memory is the largest rank's peak of live tensor
bytes during a training step (autotune.validate.memory); the prediction it is compared with
is the cost model's peak per GPU without the device's ``reserved_bytes`` (CUDA context and
library modules) and the runtime's allocator reserve (cached and fragmented blocks), which a
count of tensors does not see.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PlanResult", "plan_label", "summarize_run", "summary", "spearman", "format_table", "report_dict",
           "MEMORY_METHOD", "TIME_METHOD"]

MEMORY_METHOD = ("peak live tensor bytes in one training step, from torch's CPU allocator events "
                 "(profiler profile_memory, allocations paired by address); prediction: peak per GPU "
                 "minus the device's reserved_bytes and the runtime's allocator reserve")
TIME_METHOD = ("median over timed steps of the slowest rank's step, each step between two barriers; "
               "net: minus the largest rank's run-queue wait in that step (time runnable but without a CPU, "
               "from /proc/thread-self/schedstat), which other processes' load adds")


def plan_label(plan: Any) -> str:
    """A short name from a plan's degrees, e.g. ``dp2``, ``tp2-sp``, ``pp2-1f1b-mb4``, ``dp2-zero3``."""
    stage = plan.stages[0]
    parts = []
    if plan.dp > 1:
        parts.append(f"dp{plan.dp}")
    if stage.tp > 1:
        parts.append(f"tp{stage.tp}" + ("-sp" if stage.sequence_parallel else ""))
    if stage.ep > 1 or stage.etp > 1:
        parts.append(f"ep{stage.ep}" + (f"-etp{stage.etp}" if stage.etp > 1 else ""))
    if plan.pp > 1:
        parts.append(f"pp{plan.pp}-{plan.schedule}" + (f"-v{plan.vpp}" if plan.vpp > 1 else ""))
    if stage.zero:
        parts.append(f"zero{stage.zero}")
    if stage.recompute != "none":
        parts.append(f"recompute-{stage.recompute}")
    parts.append(f"mb{plan.micro_batch}x{plan.num_microbatches}")
    return "-".join(parts) if len(parts) > 1 else f"single-{parts[0]}"


def _error_pct(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return 100.0 * (predicted - measured) / measured


@dataclass(frozen=True, kw_only=True)
class PlanResult:
    """One plan: what was predicted, what was measured, and whether the losses matched."""

    name: str
    source: str
    status: str  # ok, numerics_mismatch, failed, timeout, unsupported
    message: str = ""
    world_size: int = 0
    plan: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    workload: dict = field(default_factory=dict)
    predicted_step_time_s: float | None = None
    measured_step_time_s: float | None = None
    step_time_error_pct: float | None = None
    predicted_peak_memory_bytes: float | None = None
    measured_peak_memory_bytes: float | None = None
    memory_error_pct: float | None = None
    predicted_tokens_per_s: float | None = None
    measured_tokens_per_s: float | None = None
    measured_step_times_s: tuple[float, ...] = ()
    measured_run_queue_s: float | None = None
    measured_net_step_time_s: float | None = None
    net_step_time_error_pct: float | None = None
    measured_peak_rss_delta_bytes: float | None = None
    external_load_cores: float | None = None  # CPU other processes took during the run, in cores
    measured_rank_seconds: tuple[dict, ...] = ()  # per rank, medians: main_cpu, other_threads_cpu, run_queue, blocked
    losses: tuple[float, ...] = ()
    reference_losses: tuple[float, ...] = ()
    max_loss_rel_diff: float | None = None
    loss_tolerance: float | None = None
    numerics_ok: bool | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def not_run(cls, case: Any, estimate: Any, *, status: str, message: str, notes: tuple[str, ...]) -> "PlanResult":
        return cls(name=case.name, source=case.source, status=status, message=message, notes=notes,
                   **_case_fields(case), **_predicted_fields(estimate))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("measured_step_times_s", "losses", "reference_losses", "notes", "measured_rank_seconds"):
            data[key] = list(data[key])
        return data


def _case_fields(case: Any) -> dict[str, Any]:
    return {"world_size": case.plan.gpus, "plan": case.plan.to_dict(), "model": asdict(case.model),
            "workload": asdict(case.workload)}


def _predicted_fields(estimate: Any) -> dict[str, Any]:
    if estimate is None:
        return {}
    reserved = estimate.memory_breakdown.get("reserved_bytes", 0.0) + estimate.memory_breakdown.get("allocator_bytes", 0.0)
    return {"predicted_step_time_s": estimate.step_time_s, "predicted_tokens_per_s": estimate.tokens_per_s,
            "predicted_peak_memory_bytes": estimate.peak_memory_bytes_per_gpu - reserved}


def summarize_run(case: Any, estimate: Any, outcome: Any, *, reference: tuple[float, ...], tolerance: float,
                  notes: tuple[str, ...]) -> PlanResult:
    """Measured figures of a finished run beside the prediction, and the numerics verdict."""
    ranks = outcome.ranks
    steps = range(min(len(r.step_times_s) for r in ranks))
    per_step = [max(r.step_times_s[i] for r in ranks) for i in steps]
    queued = [max((r.run_queue_s[i] for r in ranks if len(r.run_queue_s) > i), default=0.0) for i in steps]
    step_s = statistics.median(per_step)
    net_s = statistics.median(t - q for t, q in zip(per_step, queued))
    peak = max(r.peak_tensor_bytes for r in ranks)
    losses = next((r.losses for r in ranks if r.losses), ())
    diff = None
    if reference and len(reference) == len(losses):
        diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))
    ok = diff is not None and diff <= tolerance
    predicted = _predicted_fields(estimate)
    return PlanResult(
        name=case.name, source=case.source, status="ok" if ok else "numerics_mismatch",
        message="" if ok else ("no reference losses to compare" if diff is None
                               else f"loss differs from the single-process reference by {diff:.2e} (relative) "
                                    f"> tolerance {tolerance:.0e}"),
        **_case_fields(case), **predicted,
        measured_step_time_s=step_s, step_time_error_pct=_error_pct(predicted.get("predicted_step_time_s"), step_s),
        measured_peak_memory_bytes=peak,
        memory_error_pct=_error_pct(predicted.get("predicted_peak_memory_bytes"), peak),
        measured_tokens_per_s=case.workload.global_batch * case.workload.seq_len / step_s,
        measured_step_times_s=tuple(per_step), measured_run_queue_s=statistics.median(queued),
        measured_rank_seconds=tuple(_rank_seconds(r) for r in ranks), external_load_cores=outcome.external_load_cores,
        measured_net_step_time_s=net_s,
        net_step_time_error_pct=_error_pct(predicted.get("predicted_step_time_s"), net_s), measured_peak_rss_delta_bytes=max(r.peak_rss_delta_bytes for r in ranks),
        losses=tuple(losses), reference_losses=tuple(reference), max_loss_rel_diff=diff, loss_tolerance=tolerance,
        numerics_ok=ok, notes=notes)


def _rank_seconds(rank: Any) -> dict:
    """Where a rank's step went (medians over steps): its main thread computing, its other
    threads (communication) computing, waiting for a CPU, and blocked (waiting for peers)."""
    steps = list(zip(rank.step_times_s, rank.main_cpu_s, rank.cpu_s, rank.run_queue_s))
    if not steps:
        return {}
    med = lambda values: statistics.median(values)  # noqa: E731
    return {"rank": rank.rank, "main_cpu_s": med([m for _, m, _, _ in steps]),
            "other_threads_cpu_s": med([c - m for _, m, c, _ in steps]),
            "run_queue_s": med([q for _, _, _, q in steps]),
            "blocked_s": med([w - m - q for w, m, _, q in steps])}


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None below two points."""
    if len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    norm = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / norm if norm else None


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def summary(results: list[PlanResult]) -> dict[str, Any]:
    """Errors over the plans that ran: mean |error| of step time and memory, rank agreement."""
    timed = [r for r in results if r.step_time_error_pct is not None]
    sized = [r for r in results if r.memory_error_pct is not None]
    return {
        "plans": len(results), "ran": sum(r.measured_step_time_s is not None for r in results),
        "numerics_ok": sum(bool(r.numerics_ok) for r in results),
        "step_time_mean_abs_error_pct": statistics.fmean(abs(r.step_time_error_pct) for r in timed) if timed else None,
        "step_time_max_abs_error_pct": max((abs(r.step_time_error_pct) for r in timed), default=None),
        "step_time_spearman": spearman([r.predicted_step_time_s for r in timed], [r.measured_step_time_s for r in timed]),
        "net_step_time_mean_abs_error_pct": statistics.fmean(abs(r.net_step_time_error_pct) for r in timed) if timed else None,
        "net_step_time_spearman": spearman([r.predicted_step_time_s for r in timed],
                                           [r.measured_net_step_time_s for r in timed]),
        "run_queue_share_pct": 100 * statistics.fmean(r.measured_run_queue_s / r.measured_step_time_s for r in timed)
        if timed else None,
        "external_load_cores_max": max((r.external_load_cores for r in timed if r.external_load_cores is not None),
                                       default=None),
        "memory_mean_abs_error_pct": statistics.fmean(abs(r.memory_error_pct) for r in sized) if sized else None,
        "memory_max_abs_error_pct": max((abs(r.memory_error_pct) for r in sized), default=None),
    }


def report_dict(results: list[PlanResult], context: dict[str, Any]) -> dict[str, Any]:
    return {"schema": "autotune.validation/1", **context, "time_method": TIME_METHOD, "memory_method": MEMORY_METHOD,
            "summary": summary(results), "plans": [r.to_dict() for r in results]}


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(results: list[PlanResult]) -> str:
    """The predicted-vs-measured table, one row per plan, then the summary and any messages."""
    head = (f"{'plan':34s} {'status':18s} {'pred s':>8s} {'meas s':>8s} {'err%':>7s} {'net s':>8s} "
            f"{'pred MiB':>9s} {'meas MiB':>9s} {'err%':>7s} {'loss diff':>9s} {'busy':>5s}")
    lines = [head, "-" * len(head)]
    mib = lambda b: None if b is None else b / 2**20  # noqa: E731
    for r in results:
        lines.append(f"{r.name[:34]:34s} {r.status:18s} {_cell(r.predicted_step_time_s, '8.4f')} "
                     f"{_cell(r.measured_step_time_s, '8.4f')} {_cell(r.step_time_error_pct, '+7.1f')} "
                     f"{_cell(r.measured_net_step_time_s, '8.4f')} "
                     f"{_cell(mib(r.predicted_peak_memory_bytes), '9.1f')} {_cell(mib(r.measured_peak_memory_bytes), '9.1f')} "
                     f"{_cell(r.memory_error_pct, '+7.1f')} {_cell(r.max_loss_rel_diff, '9.1e')} "
                     f"{_cell(r.external_load_cores, '5.2f')}")
    s = summary(results)
    lines.append("")
    lines.append(f"step time: mean |error| {_cell(s['step_time_mean_abs_error_pct'], '.1f')}%, "
                 f"Spearman {_cell(s['step_time_spearman'], '.2f')}; peak memory: mean |error| "
                 f"{_cell(s['memory_mean_abs_error_pct'], '.1f')}%; numerics ok {s['numerics_ok']}/{s['plans']}")
    busy = s["external_load_cores_max"]
    if busy is not None and busy > 0.25:
        lines.append(f"note: other processes used up to {busy:.2f} cores during the runs (column 'busy'); "
                     "wall times include that load, 'net s' removes the workers' waits for a CPU")
    for r in results:
        for text in ((r.message,) if r.message else ()) + r.notes:
            lines.append(f"  {r.name}: {text}")
    return "\n".join(lines)
