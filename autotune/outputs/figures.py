"""The canvas every plot is drawn on: fixed-margin figures on matplotlib's Agg canvas (no pyplot
state, no display), written atomically; and the duration format of the plots' labels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["new_figure", "save_png", "fmt_duration", "GIB"]

GIB = 2.0**30


def new_figure(width_in: float, height_in: float, *, left_in: float = 0.85, right_in: float = 0.25,
               top_in: float = 0.4, bottom_in: float = 0.55) -> Any:
    """A figure with fixed margins (inches): a layout engine would double the drawing time
    (0.6 s of the four run plots here), which every search run pays."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110)
    fig.subplots_adjust(left=left_in / width_in, right=1.0 - right_in / width_in, top=1.0 - top_in / height_in,
                        bottom=bottom_in / height_in)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: str | Path) -> Path:
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


def fmt_duration(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"
