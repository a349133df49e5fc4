"""Plots of a plan and of a search, as PNG files.

Drawn on matplotlib's Agg canvas (``matplotlib.figure.Figure``, no pyplot state, no display),
imported only when a plot is drawn. Inputs are plain data: a plan and its estimate, candidate
points, (trial number, value) pairs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.cost.estimate import Estimate
from autotune.outputs.schedule import Block, simulate_schedule
from autotune.plan.plan import Plan

__all__ = ["stage_pass_times_s", "timeline_figure", "plot_timeline", "memory_figure", "plot_memory", "pareto_front",
           "plot_pareto", "plot_history", "write_run_plots", "MEMORY_CLASSES"]

# Stacked memory classes (Estimate memory keys) and their labels; offloaded bytes are not in HBM.
MEMORY_CLASSES = (("weights_bytes", "weights"), ("gradients_bytes", "gradients"),
                  ("optimizer_states_bytes", "optimizer states"), ("activations_bytes", "activations"),
                  ("temporary_bytes", "temporary"), ("reserved_bytes", "reserved"))
_COLORS = {"F": "#4C72B0", "B": "#DD8452"}
_GIB = 2.0**30


def _figure(width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path) -> Path:
    """Write the PNG through a temporary file, so a reader never sees half an image."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def stage_pass_times_s(plan: Plan, estimate: Estimate) -> tuple[list[float], list[float]]:
    """(forward, backward) seconds of one micro-batch on each stage, from the stage's micro-batch
    time: backward is 2x forward (its FLOPs), 3x with full recomputation (which repeats the
    forward), as in Narayanan et al. SC'21 sec. 5.1 (3x and 4x the forward for a whole step)."""
    fwd, bwd = [], []
    for stage, est in zip(plan.stages, estimate.stages):
        ratio = 3.0 if stage.recompute == "full" else 2.0
        fwd.append(est.microbatch_time_s / (1.0 + ratio))
        bwd.append(est.microbatch_time_s * ratio / (1.0 + ratio))
    return fwd, bwd


def _time_unit(span_s: float) -> tuple[float, str]:
    return (1.0, "s") if span_s >= 10 else (1e3, "ms") if span_s >= 1e-2 else (1e6, "us")


def _shade(color: str, chunk: int, num_chunks: int) -> tuple[float, ...]:
    """``color`` lightened for later chunks of an interleaved schedule."""
    from matplotlib.colors import to_rgb

    mix = 0.45 * chunk / max(1, num_chunks - 1)
    return tuple(c + (1.0 - c) * mix for c in to_rgb(color))


def timeline_figure(blocks: Sequence[Block], num_stages: int, *, title: str = "") -> Any:
    """Stages (rows) x time: one bar per forward and backward of each micro-batch (and chunk,
    lighter for later chunks)."""
    from matplotlib.patches import Patch

    span = max(b.end_s for b in blocks)
    scale, unit = _time_unit(span)
    num_chunks = 1 + max(b.chunk for b in blocks)
    fig = _figure(10.0, 1.4 + 0.45 * num_stages)
    ax = fig.add_subplot()
    for stage in range(num_stages):
        for kind in ("F", "B"):
            mine = [b for b in blocks if b.stage == stage and b.kind == kind]
            colors = [_shade(_COLORS[kind], b.chunk, num_chunks) for b in mine]
            bars = ax.broken_barh([(b.start_s * scale, (b.end_s - b.start_s) * scale) for b in mine],
                                  (stage - 0.4, 0.8), facecolors=colors, edgecolors="white", linewidth=0.5)
            bars.set_gid("blocks")
    if len(blocks) <= 200:  # micro-batch numbers, while they fit
        for b in blocks:
            ax.text((b.start_s + b.end_s) / 2 * scale, b.stage, str(b.microbatch), ha="center", va="center",
                    fontsize=6, color="white")
    ax.set_xlim(0, span * scale)
    ax.set_ylim(num_stages - 0.5, -0.5)
    ax.set_yticks(range(num_stages), [f"stage {i}" for i in range(num_stages)])
    ax.set_xlabel(f"time ({unit})")
    ax.legend(handles=[Patch(color=_COLORS["F"], label="forward"), Patch(color=_COLORS["B"], label="backward")],
              loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, fontsize=8, frameon=False)
    ax.set_title(title or "pipeline timeline", loc="left")
    return fig


def plot_timeline(plan: Plan, estimate: Estimate, path: str | Path, *, title: str = "") -> Path:
    """The plan's pipeline schedule with the estimate's stage times, as a PNG."""
    fwd, bwd = stage_pass_times_s(plan, estimate)
    blocks = simulate_schedule(fwd, bwd, plan.num_microbatches, plan.schedule, plan.vpp)
    default = f"{plan.schedule} schedule: {plan.pp} stages x {plan.num_microbatches} micro-batches"
    return _save(timeline_figure(blocks, plan.pp, title=title or default), path)


def memory_figure(estimate: Estimate, *, title: str = "") -> Any:
    """Memory per GPU of each stage, stacked by class, against the device's capacity."""
    stages = estimate.stages
    fig = _figure(max(5.0, 1.5 + 0.5 * len(stages)), 4.0)
    ax = fig.add_subplot()
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    for key, label in MEMORY_CLASSES:
        heights = [s.memory_bytes.get(key, 0.0) / _GIB for s in stages]
        ax.bar(x, heights, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.axhline(estimate.memory_capacity_bytes / _GIB, color="crimson", linestyle="--",
               label=f"capacity {estimate.memory_capacity_bytes / _GIB:.0f} GiB")
    for i, s in enumerate(stages):
        off = s.memory_bytes.get("offloaded_bytes", 0.0)
        if off > 0:
            ax.annotate(f"+{off / _GIB:.1f} GiB\noff HBM", (i, bottom[i]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [str(i) for i in x])
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GiB per GPU")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title or "memory per stage")
    return fig


def plot_memory(estimate: Estimate, path: str | Path, *, title: str = "") -> Path:
    """:func:`memory_figure` as a PNG."""
    return _save(memory_figure(estimate, title=title), path)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (throughput, memory) points no other point beats on both (more
    throughput, less memory), by increasing memory."""
    order = sorted(range(len(points)), key=lambda i: (points[i][1], -points[i][0]))
    front, best = [], -math.inf
    for i in order:
        if points[i][0] > best:
            front.append(i)
            best = points[i][0]
    return front


def plot_pareto(points: Sequence[tuple[float, float, str]], path: str | Path, *,
                capacity_bytes: float = 0.0, title: str = "") -> Path:
    """Candidates as (tokens/s, peak memory bytes per GPU, label); the Pareto front is marked."""
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot()
    mem = [p[1] / _GIB for p in points]
    tput = [p[0] for p in points]
    ax.scatter(mem, tput, s=12, color="#999999", label="candidates")
    front = pareto_front([(p[0], p[1]) for p in points])
    ax.plot([mem[i] for i in front], [tput[i] for i in front], "o-", color="#C44E52", drawstyle="steps-post",
            label="Pareto front")
    for i in front[:12]:
        ax.annotate(points[i][2], (mem[i], tput[i]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if capacity_bytes > 0:
        ax.axvline(capacity_bytes / _GIB, color="crimson", linestyle="--", label="capacity")
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("tokens/s")
    ax.legend(fontsize=8)
    ax.set_title(title or "throughput against memory")
    return _save(fig, path)


def plot_history(trials: Sequence[tuple[int, float | None]], path: str | Path, *, maximize: bool = True,
                 ylabel: str = "tokens/s", title: str = "") -> Path:
    """Each trial's value and the best so far; trials without a value (failed, pruned) are skipped."""
    done = sorted((n, v) for n, v in trials if v is not None and math.isfinite(v))
    fig = _figure(7.0, 4.0)
    ax = fig.add_subplot()
    ax.scatter([n for n, _ in done], [v for _, v in done], s=10, color="#4C72B0", label="trial")
    best, running = [], None
    for _, v in done:
        running = v if running is None else (max(running, v) if maximize else min(running, v))
        best.append(running)
    ax.plot([n for n, _ in done], best, color="#C44E52", drawstyle="steps-post", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.set_title(title or "optimisation history")
    return _save(fig, path)


def write_run_plots(run_dir: str | Path, *, plan: Plan, estimate: Estimate,
                    candidates: Sequence[tuple[float, float, str]] = (),
                    history: Sequence[tuple[int, float | None]] = ()) -> dict[str, Path]:
    """The run directory's plots: timeline.png, memory.png, and pareto.png / history.png when
    candidates / trials are given."""
    run = Path(run_dir)
    paths = {"timeline": plot_timeline(plan, estimate, run / "timeline.png"),
             "memory": plot_memory(estimate, run / "memory.png")}
    if candidates:
        paths["pareto"] = plot_pareto(candidates, run / "pareto.png", capacity_bytes=estimate.memory_capacity_bytes)
    if history:
        paths["history"] = plot_history(history, run / "history.png")
    return paths
