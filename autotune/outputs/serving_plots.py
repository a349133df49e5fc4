"""The timeline of a decode or serving plan: the prefill (TTFT), then every decode step (TPOT
each), to scale, so the plot shows where the time goes (decode, for most serving batches).

The estimate gives the phases' times (``Estimate.inference``), not each pipeline stage's share
of a decode step, so the rows are the phases of one replica, not the stages."""

from __future__ import annotations

from typing import Any

from autotune.cost.estimate import Estimate
from autotune.outputs.figures import fmt_duration as _ms, new_figure as _figure

__all__ = ["serving_timeline_figure", "phase_spans"]

_PREFILL, _DECODE = "#4C72B0", ("#55A868", "#8CC79A")  # decode steps alternate two greens
MAX_DRAWN_STEPS = 400  # above, the decode phase is one bar (steps of under a pixel or two)


def phase_spans(estimate: Estimate) -> list[tuple[str, float, float]]:
    """(phase, start, end) in seconds: the prefill, then one span per decode step."""
    m = estimate.inference
    spans, t = [], 0.0
    if m.ttft_s is not None:
        spans.append(("prefill", 0.0, m.ttft_s))
        t = m.ttft_s
    for _ in range(m.decode_steps if m.tpot_s is not None else 0):
        spans.append(("decode", t, t + m.tpot_s))
        t += m.tpot_s
    return spans


def _unit(span_s: float) -> tuple[float, str]:
    return (1.0, "s") if span_s >= 10 else (1e3, "ms")


def _bars(ax: Any, spans: list[tuple[str, float, float]], scale: float) -> None:
    prefill = [(s * scale, (e - s) * scale) for kind, s, e in spans if kind == "prefill"]
    if prefill:
        ax.broken_barh(prefill, (0.1, 0.8), facecolors=_PREFILL, edgecolors="white", linewidth=0.5)
    steps = [(s, e) for kind, s, e in spans if kind == "decode"]
    if not steps:
        return
    if len(steps) > MAX_DRAWN_STEPS:
        ax.broken_barh([(steps[0][0] * scale, (steps[-1][1] - steps[0][0]) * scale)], (0.1, 0.8), facecolors=_DECODE[0])
        return
    ax.broken_barh([(s * scale, (e - s) * scale) for s, e in steps], (0.1, 0.8),
                   facecolors=[_DECODE[i % 2] for i in range(len(steps))], linewidth=0)


def _labels(ax: Any, estimate: Estimate, scale: float) -> None:
    """The phases named on the plot: TTFT over the prefill, steps x TPOT over the decode phase."""
    m = estimate.inference
    total = estimate.step_time_s
    if m.ttft_s is not None:
        ax.annotate(f"prefill\nTTFT {_ms(m.ttft_s)}\n({100 * m.ttft_s / total:.0f}%)", (m.ttft_s / 2 * scale, 1.0),
                    xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize=9)
    if m.tpot_s is not None and m.decode_steps:
        start = m.ttft_s or 0.0
        decode_s = m.decode_steps * m.tpot_s
        ax.annotate(f"{m.decode_steps} decode steps x TPOT {_ms(m.tpot_s)} = {_ms(decode_s)} ({100 * decode_s / total:.0f}%)",
                    ((start + decode_s / 2) * scale, 1.0), xytext=(0, 4), textcoords="offset points", ha="center",
                    va="bottom", fontsize=9)


def serving_timeline_figure(estimate: Estimate, *, title: str = "") -> Any:
    """One replica's batch over time: the prefill bar, then each decode step (alternating greens,
    one bar when there are too many to draw), with TTFT, TPOT and each phase's share written on it."""
    from matplotlib.patches import Patch

    spans = phase_spans(estimate)
    scale, unit = _unit(estimate.step_time_s)
    fig = _figure(10.0, 2.6, top_in=1.05, bottom_in=0.55, left_in=0.4)
    ax = fig.add_subplot()
    _bars(ax, spans, scale)
    ax.set_xlim(0, estimate.step_time_s * scale)
    ax.set_ylim(0, 1.6)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    _labels(ax, estimate, scale)
    ax.set_xlabel(f"time ({unit})")
    handles = [Patch(color=c, label=label) for c, label, kind in
               ((_PREFILL, "prefill (all prompts)", "prefill"), (_DECODE[0], "decode step (one token per sequence)", "decode"))
               if any(k == kind for k, _, _ in spans)]
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.15), ncols=2, fontsize=8, frameon=False)
    m = estimate.inference
    default = f"{'serving' if m.ttft_s is not None else 'decode'}: one replica's batch, {_ms(estimate.step_time_s)}"
    ax.set_title(title or default, loc="left", y=1.15)
    return fig
