"""What a plan becomes: framework configs (exports) and plots. matplotlib loads only when a plot
is drawn, each exporter only when its format is asked for (autotune.outputs.export), and the
plotting module on first use of one of its names below: a search writing its run directory
loads neither."""

from __future__ import annotations

import importlib
from typing import Any

from autotune.outputs.export import FORMATS, ExportResult, export, export_plan, write_export

__all__ = ["FORMATS", "ExportResult", "export", "export_plan", "write_export", "plot_curve", "plot_history",
           "plot_memory", "plot_pareto", "plot_timeline", "write_run_plots"]

_PLOTS = ("plot_curve", "plot_history", "plot_memory", "plot_pareto", "plot_timeline", "write_run_plots")


def __getattr__(name: str) -> Any:
    if name in _PLOTS:
        return getattr(importlib.import_module("autotune.outputs.plots"), name)
    raise AttributeError(f"module 'autotune.outputs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
