"""Plots of a plan and of a search, as PNG files.

Drawn on matplotlib's Agg canvas (``matplotlib.figure.Figure``, no pyplot state, no display),
imported only when a plot is drawn. Inputs are plain data: a plan and its estimate, candidate
points, (trial number, value) pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.cost.estimate import Estimate
from autotune.outputs.figures import GIB as _GIB, fmt_duration as _ms, new_figure as _figure, save_png as _save
from autotune.outputs.pareto_plot import Point, pareto_front, plot_pareto
from autotune.outputs.schedule import Block, simulate_schedule
from autotune.plan.plan import Plan

__all__ = ["stage_pass_times_s", "timeline_figure", "plot_timeline", "drawn_microbatches", "memory_figure", "plot_memory", "pareto_front",
           "plot_pareto", "plot_history", "curve_figure", "plot_curve", "write_run_plots", "MEMORY_CLASSES"]

# Stacked memory classes (Estimate memory keys) and their labels; offloaded bytes are not in HBM.
MEMORY_CLASSES = (("weights_bytes", "weights"), ("gradients_bytes", "gradients"),
                  ("optimizer_states_bytes", "optimizer states"), ("activations_bytes", "activations"),
                  ("temporary_bytes", "temporary"), ("allocator_bytes", "allocator reserve"),
                  ("reserved_bytes", "reserved"))
_COLORS = {"F": "#4C72B0", "B": "#DD8452"}


def stage_pass_times_s(plan: Plan, estimate: Estimate) -> tuple[list[float], list[float]]:
    """(forward, backward) seconds of one micro-batch on each stage, from the stage's micro-batch
    time: backward is 2x forward (its FLOPs), 3x with full recomputation (which repeats the
    forward), as in Narayanan et al. SC'21 sec. 5.1 (3x and 4x the forward for a whole step);
    recomputing only the first N layers of a stage repeats that share of the forward."""
    fwd, bwd = [], []
    for stage, est in zip(plan.stages, estimate.stages):
        ratio = 2.0 + (_recomputed_share(stage) if stage.recompute == "full" else 0.0)
        fwd.append(est.microbatch_time_s / (1.0 + ratio))
        bwd.append(est.microbatch_time_s * ratio / (1.0 + ratio))
    return fwd, bwd


def _recomputed_share(stage) -> float:
    """Share of the stage's layers full recomputation repeats (recompute_layers 0: all)."""
    return min(stage.recompute_layers, stage.num_layers) / stage.num_layers if stage.recompute_layers else 1.0


def _time_unit(span_s: float) -> tuple[float, str]:
    return (1.0, "s") if span_s >= 10 else (1e3, "ms") if span_s >= 1e-2 else (1e6, "us")


def _shade(color: str, chunk: int, num_chunks: int) -> tuple[float, ...]:
    """``color`` lightened for later chunks of an interleaved schedule."""
    from matplotlib.colors import to_rgb

    mix = 0.45 * chunk / max(1, num_chunks - 1)
    return tuple(c + (1.0 - c) * mix for c in to_rgb(color))


def _block_labels(ax: Any, blocks: Sequence[Block], scale: float) -> None:
    """Micro-batch numbers on the bars while they fit; with a few blocks a row (a one-stage plan),
    each bar says what it is and how long it takes, as long a label as fits in the bar."""
    if len(blocks) > 200:
        return
    words = {"F": "forward", "B": "backward"}
    few = max(sum(1 for b in blocks if b.stage == s) for s in {b.stage for b in blocks}) <= 6
    renderer = ax.figure.canvas.get_renderer() if few else None
    for b in blocks:
        x = (b.start_s + b.end_s) / 2 * scale
        width = b.end_s - b.start_s
        labels = [f"{words[b.kind]} (micro-batch {b.microbatch}): {_ms(width)}", f"{b.kind}{b.microbatch}: {_ms(width)}"] if few else []
        bar_px = abs(ax.transData.transform((b.end_s * scale, 0))[0] - ax.transData.transform((b.start_s * scale, 0))[0])
        for text in labels:
            label = ax.text(x, b.stage, text, ha="center", va="center", fontsize=8, color="white")
            if label.get_window_extent(renderer).width < 0.92 * bar_px:
                break
            label.remove()
        else:
            ax.text(x, b.stage, str(b.microbatch), ha="center", va="center", fontsize=6, color="white")


def _tail(ax: Any, num_stages: int, start_s: float, tail: tuple[float, str], scale: float) -> None:
    """The step's tail after the schedule (exposed gradient sync, optimizer...) on every stage."""
    tail_s, _ = tail  # its label is in the legend: the bar is often too narrow for it
    ax.broken_barh([(start_s * scale, tail_s * scale)], (-0.4, num_stages - 0.2), facecolors="#BBBBBB",
                   edgecolors="white", linewidth=0.5, gid="step-tail")


def timeline_figure(blocks: Sequence[Block], num_stages: int, *, title: str = "", note: str = "",
                    tail: tuple[float, str] = (0.0, "")) -> Any:
    """Stages (rows) x time: one bar per forward and backward of each micro-batch (and chunk,
    lighter for later chunks); ``note`` is written in a box on the axes; ``tail`` (seconds,
    label) is the rest of the step after the schedule, grey. A forward-only schedule (inference)
    has no backward bars or legend entry."""
    from matplotlib.patches import Patch

    end = max(b.end_s for b in blocks)
    span = end + tail[0]
    scale, unit = _time_unit(span)
    num_chunks = 1 + max(b.chunk for b in blocks)
    kinds = [k for k in ("F", "B") if any(b.kind == k for b in blocks)]
    edge_pt = 0.5 if len(blocks) <= 120 * num_stages else 0.0  # white gaps would hide bars of a pixel or two
    fig = _figure(10.0, 1.4 + 0.45 * num_stages + (0.35 if note else 0.0), top_in=0.6 + (0.35 if note else 0.0))
    ax = fig.add_subplot()
    for stage in range(num_stages):
        for kind in kinds:
            mine = [b for b in blocks if b.stage == stage and b.kind == kind]
            colors = [_shade(_COLORS[kind], b.chunk, num_chunks) for b in mine]
            bars = ax.broken_barh([(b.start_s * scale, (b.end_s - b.start_s) * scale) for b in mine],
                                  (stage - 0.4, 0.8), facecolors=colors, edgecolors="white", linewidth=edge_pt)
            bars.set_gid("blocks")
    if tail[0] > 0:
        _tail(ax, num_stages, end, tail, scale)
    ax.set_xlim(0, span * scale)
    ax.set_ylim(num_stages - 0.5, -0.5)
    _block_labels(ax, blocks, scale)
    ax.set_yticks(range(num_stages), [f"stage {i}" for i in range(num_stages)])
    ax.set_xlabel(f"time ({unit})")
    labels = {"F": "forward", "B": "backward"}
    extra = [Patch(color="#BBBBBB", label="rest of the step")] if tail[0] > 0 else []
    ax.legend(handles=[Patch(color=_COLORS[k], label=labels[k]) for k in kinds] + extra,
              loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=3, fontsize=8, frameon=False)
    ax.set_title(title or "pipeline timeline", loc="left")
    if note:
        fig.text(0.5 / fig.get_figwidth(), 1.0 - 0.12 / fig.get_figheight(), note, fontsize=8, va="top", ha="left",
                 bbox={"boxstyle": "round", "facecolor": "#F4F4F4", "edgecolor": "#BBBBBB"}, gid="timeline-note")
    return fig


MAX_DRAWN_MICROBATCHES = 16  # per stage and chunk: above, the timeline shows a few and says so


def drawn_microbatches(plan: Plan) -> int:
    """Micro-batches the timeline draws: all while each row stays readable, else enough for the
    warm-up, a stretch of the steady state and the cool-down (a multiple of pp when interleaved)."""
    m = plan.num_microbatches
    if m * plan.vpp <= 2 * MAX_DRAWN_MICROBATCHES:
        return m
    k = max(2 * plan.pp, 8) if plan.vpp == 1 else 2 * plan.pp
    return min(m, k)


def _is_inference(estimate: Estimate) -> bool:
    return estimate.inference is not None


def _timeline_note(plan: Plan, estimate: Estimate, drawn: int, tail: tuple[float, str] = (0.0, "")) -> str:
    """The step time, the pipeline bubble's share (with stages), the rest of the step drawn grey
    and how many micro-batches are drawn, as the plot's note."""
    bubble_s = estimate.breakdown.get("pipeline_bubble_s", 0.0)
    step = estimate.step_time_s
    parts = [f"step {_ms(step)}"]
    if plan.pp > 1:
        parts.append(f"pipeline bubble {_ms(bubble_s)} ({100 * bubble_s / step:.1f}% of the step)")
    if tail[0] > 0:
        parts.append(f"rest of the step (grey) {tail[1]}")
    if drawn < plan.num_microbatches:
        parts.insert(0, f"{drawn} of {plan.num_microbatches} micro-batches drawn (the steady state repeats)")
    return "; ".join(parts) + " [estimate]"


def plot_timeline(plan: Plan, estimate: Estimate, path: str | Path, *, title: str = "") -> Path:
    """The plan's pipeline schedule with the estimate's stage times, as a PNG; an inference plan
    runs forward passes only. Many micro-batches are summarised (:func:`drawn_microbatches`)
    with the step time and bubble share written on the plot."""
    inference = _is_inference(estimate)
    if inference and estimate.inference.tpot_s is not None:  # decode or serve: the phases, to scale
        from autotune.outputs.serving_plots import serving_timeline_figure

        return _save(serving_timeline_figure(estimate, title=title), path)
    if inference:  # prefill only: the stage estimates are the prefill's
        fwd, bwd = [s.microbatch_time_s for s in estimate.stages], [0.0] * plan.pp
    else:
        fwd, bwd = stage_pass_times_s(plan, estimate)
    drawn = drawn_microbatches(plan)
    blocks = simulate_schedule(fwd, bwd, drawn, plan.schedule, plan.vpp)
    if inference:
        blocks = [b for b in blocks if b.kind == "F"]
    kind = "prefill (forward only)" if inference else f"{plan.schedule} schedule"
    chunks = f" x {plan.vpp} chunks" if plan.vpp > 1 else ""
    stages = f"{plan.pp} stage" + ("s" if plan.pp != 1 else "")
    microbatches = f"{plan.num_microbatches} micro-batch" + ("es" if plan.num_microbatches != 1 else "")
    default = f"{kind}: {stages} x {microbatches}{chunks}"
    tail = _step_tail(estimate, max(b.end_s for b in blocks)) if drawn == plan.num_microbatches else (0.0, "")
    note = _timeline_note(plan, estimate, drawn, tail)
    return _save(timeline_figure(blocks, plan.pp, title=title or default, note=note, tail=tail), path)


_TAIL_PARTS = (("dp_comm_s", "gradient sync"), ("optimizer_s", "optimizer"))  # the breakdown's per-step tail


def _step_tail(estimate: Estimate, schedule_s: float) -> tuple[float, str]:
    """(seconds, label) of the step beyond the drawn schedule: the exposed data-parallel sync,
    the optimizer step and what else the estimate adds outside the micro-batches (not drawn when
    under 1% of the step)."""
    tail_s = estimate.step_time_s - schedule_s
    if tail_s < 0.01 * estimate.step_time_s:
        return 0.0, ""
    parts = [name for key, name in _TAIL_PARTS if estimate.breakdown.get(key, 0.0) > 0.002 * estimate.step_time_s]
    return tail_s, f"{_ms(tail_s)}" + (f" ({', '.join(parts)})" if parts else "")


def memory_figure(estimate: Estimate, *, title: str = "") -> Any:
    """Memory per GPU of each stage, stacked by class, against the device's capacity; classes
    every stage leaves empty are left out, and an inference estimate's activations are its KV
    cache (with the activations of the micro-batch in flight)."""
    stages = estimate.stages
    width_in = max(5.0, 1.5 + 0.5 * len(stages)) + 1.6  # the legend right of the axes
    fig = _figure(width_in, 4.0, right_in=1.75)
    ax = fig.add_subplot()
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    labels = dict(MEMORY_CLASSES)
    if _is_inference(estimate):
        labels["activations_bytes"] = "KV cache + activations"
    for key, label in labels.items():
        heights = [s.memory_bytes.get(key, 0.0) / _GIB for s in stages]
        if not any(heights):
            continue
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
    ax.set_title(title or ("memory per stage (inference)" if _is_inference(estimate) else "memory per stage"))
    return fig


def plot_memory(estimate: Estimate, path: str | Path, *, title: str = "") -> Path:
    """:func:`memory_figure` as a PNG."""
    return _save(memory_figure(estimate, title=title), path)


def plot_history(trials: Sequence[tuple[int, float | None]], path: str | Path, *, maximize: bool = True,
                 ylabel: str = "tokens/s", xlabel: str = "trial", title: str = "") -> Path:
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
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.set_title(title or "optimisation history")
    return _save(fig, path)


def _curve_lines(ax: Any, curve: Any) -> list[Any]:
    """Linear scaling and tokens/s on ``ax`` (log), efficiency on a twin axis; the legend handles."""
    fits = [p for p in curve.points if p.estimate is not None]
    if not fits:
        return []
    gpus = [p.gpus for p in fits]
    per_gpu = fits[0].tokens_per_s / fits[0].gpus
    ax.set_yscale("log")
    handles = ax.plot(gpus, [g * per_gpu for g in gpus], ":", color="#999999", label="linear scaling")
    handles += ax.plot(gpus, [p.tokens_per_s for p in fits], "o-", color="#4C72B0", label="tokens/s")
    eff = ax.twinx()
    handles += eff.plot(gpus, [100 * p.efficiency for p in fits], "s--", color="#DD8452",
                        label="scaling efficiency (right axis)")
    eff.axhline(100 * curve.efficiency_threshold, color="#DD8452", linewidth=0.6, linestyle=":")
    eff.set_ylim(0, max(110.0, 105 * max(p.efficiency for p in fits)))
    eff.set_ylabel("scaling efficiency (%)")
    return handles


def curve_figure(curve: Any, *, title: str = "") -> Any:
    """A scaling curve (autotune.search.curve.ScalingCurve) on log-log axes: tokens/s and linear
    scaling from the smallest fitting count, scaling efficiency (right axis), the knee marked;
    counts where nothing fits are crosses on the GPU axis."""
    from matplotlib.ticker import NullLocator

    fig = _figure(7.5, 5.0, right_in=0.85, top_in=0.45, bottom_in=1.15)
    ax = fig.add_subplot()
    ax.set_xscale("log", base=2)
    ax.set_xticks([p.gpus for p in curve.points], [str(p.gpus) for p in curve.points], fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())
    handles = _curve_lines(ax, curve)
    nofit = [p.gpus for p in curve.points if p.estimate is None]
    if nofit:
        handles += ax.plot(nofit, [0.0] * len(nofit), "x", color="crimson", transform=ax.get_xaxis_transform(),
                           clip_on=False, label="nothing fits")
    if curve.knee_gpus is not None:
        handles.append(ax.axvline(curve.knee_gpus, color="crimson", linestyle="--", linewidth=1.0,
                                  label=f"knee: {curve.knee_gpus} GPUs (efficiency >= "
                                        f"{100 * curve.efficiency_threshold:.0f}%)"))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("tokens/s")
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncols=3, frameon=False)
    ax.set_title(title or f"{curve.model}: strong scaling", loc="left")
    return fig


def plot_curve(curve: Any, path: str | Path, *, title: str = "") -> Path:
    """:func:`curve_figure` as a PNG."""
    return _save(curve_figure(curve, title=title), path)


def write_run_plots(run_dir: str | Path, *, plan: Plan, estimate: Estimate,
                    candidates: Sequence[Point] = (), baselines: Sequence[Point] = (),
                    history: Sequence[tuple[int, float | None]] = (),
                    history_axes: dict[str, Any] | None = None) -> dict[str, Path]:
    """The run directory's plots: timeline.png, memory.png, and pareto.png / history.png when
    candidates / trials are given (``history_axes``: plot_history's maximize, xlabel, ylabel)."""
    from autotune.outputs.curve_report import plan_summary

    run = Path(run_dir)
    paths = {"timeline": plot_timeline(plan, estimate, run / "timeline.png"),
             "memory": plot_memory(estimate, run / "memory.png")}
    if candidates:
        chosen = (estimate.tokens_per_s, estimate.peak_memory_bytes_per_gpu, plan_summary(plan))
        ylabel = "TPS (tokens/s served)" if _is_inference(estimate) else "tokens/s"
        paths["pareto"] = plot_pareto(candidates, run / "pareto.png", capacity_bytes=estimate.memory_capacity_bytes,
                                      chosen=chosen, baselines=baselines, ylabel=ylabel)
    if history:
        paths["history"] = plot_history(history, run / "history.png", **(history_axes or {}))
    return paths
