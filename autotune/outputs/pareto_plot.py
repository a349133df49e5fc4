"""The Pareto plot of a search: throughput against peak memory of each slice's best plan, the
front numbered and keyed beside the axes, the chosen plan a star, each baseline a hollow marker
on top (a baseline that is the chosen plan rings its star). The memory axis spans the points,
not the GPU's capacity, which is drawn where it is near them and else given by an arrow."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.outputs.figures import GIB as _GIB, new_figure as _figure, save_png as _save

__all__ = ["pareto_front", "plot_pareto", "Point"]


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


Point = tuple[float, float, str]  # (tokens/s, peak memory bytes per GPU, label)
_BASELINE_MARKERS = ("s", "D", "^", "v", "P", "X")


def _place_labels(ax: Any, xy: Sequence[tuple[float, float]], texts: Sequence[str]) -> None:
    """Short labels next to points, each at the first of eight offsets where it overlaps no label
    placed before (pixel boxes); a label with no free place is left out of the axes (the key
    beside the plot still lists it)."""
    fig = ax.figure
    fig.canvas.draw()  # the axes transform needs the final limits
    taken: list[Any] = []
    offsets = [(4, 4), (4, -10), (-14, 4), (-14, -10), (4, 12), (-14, 12), (4, -18), (-14, -18)]
    renderer = fig.canvas.get_renderer()
    for (x, y), text in zip(xy, texts):
        for dx, dy in offsets:
            label = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                                fontweight="bold")
            box = label.get_window_extent(renderer).expanded(1.1, 1.2)
            if not any(box.overlaps(other) for other in taken):
                taken.append(box)
                break
            label.remove()


def _same_point(a: Point, b: Point) -> bool:
    return abs(a[0] - b[0]) <= 0.005 * max(abs(b[0]), 1e-9) and abs(a[1] - b[1]) <= 0.005 * max(abs(b[1]), 1.0)


def _memory_axis(ax: Any, memory_gib: Sequence[float], capacity_gib: float) -> None:
    """The memory axis spans the points (from 0), not the GPU's capacity: the capacity line is
    drawn when it is near them, else an arrow at the right edge gives it."""
    right = 1.15 * max(memory_gib, default=1.0)
    if capacity_gib <= 0:
        ax.set_xlim(0, right)
        return
    if capacity_gib <= 1.6 * right:
        ax.axvline(capacity_gib, color="crimson", linestyle="--", label=f"capacity {capacity_gib:.0f} GiB")
        ax.set_xlim(0, max(right, 1.05 * capacity_gib))
        return
    ax.set_xlim(0, right)
    ax.annotate(f"capacity {capacity_gib:.0f} GiB \u2192", (1.0, 0.02), xycoords="axes fraction", ha="right", va="bottom",
                fontsize=8, color="crimson")


def plot_pareto(points: Sequence[Point], path: str | Path, *, capacity_bytes: float = 0.0, title: str = "",
                chosen: Point | None = None, baselines: Sequence[Point] = (), ylabel: str = "tokens/s") -> Path:
    """Each slice's best plan as a grey point, the Pareto front in red with numbered points (the
    key right of the axes says which plan each number is), the chosen plan as a star and each
    baseline with its own marker, named in the legend."""
    fig = _figure(10.0, 5.0, right_in=3.6)
    ax = fig.add_subplot()
    gib = lambda p: p[1] / _GIB  # noqa: E731
    ax.scatter([gib(p) for p in points], [p[0] for p in points], s=12, color="#999999", label="each slice's best plan")
    front = [points[i] for i in pareto_front([(p[0], p[1]) for p in points])]
    if front:
        ax.plot([gib(p) for p in front], [p[0] for p in front], "o-", color="#C44E52", drawstyle="steps-post",
                markersize=4, label="Pareto front")
    if chosen is not None:
        ax.scatter([gib(chosen)], [chosen[0]], s=160, marker="*", color="#F2B701", edgecolors="black", linewidths=0.6,
                   zorder=4, label="chosen plan")
    for i, b in enumerate(baselines):  # hollow and on top: a baseline at the chosen plan rings its star
        same = chosen is not None and _same_point(b, chosen)
        ax.scatter([gib(b)], [b[0]], s=110 if same else 60, marker=_BASELINE_MARKERS[i % len(_BASELINE_MARKERS)],
                   zorder=5, facecolors="none", edgecolors=f"C{i}", linewidths=1.6,
                   label=f"baseline {b[2]}" + (" (= the chosen plan)" if same else ""))
    _memory_axis(ax, [gib(p) for p in [*points, *baselines, *([chosen] if chosen else [])]], capacity_bytes / _GIB)
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter())  # 1.2M, not an offset label under the title
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    shown = front[:9]
    _place_labels(ax, [(gib(p), p[0]) for p in shown], [str(i + 1) for i in range(len(shown))])
    key = [f"{i + 1}: {p[2]}" for i, p in enumerate(shown)]
    if chosen is not None:
        key.append(f"*: {chosen[2]}")
    if key:
        fig.text(1.0 - 3.5 / fig.get_figwidth(), 0.1, "Pareto front\n" + "\n".join(key), fontsize=6.5, va="bottom",
                 ha="left", family="monospace", gid="pareto-key")
    ax.set_title(title or f"{ylabel.split(' (')[0]} against memory")
    return _save(fig, path)
