"""What a plan becomes: framework configs (exports) and plots. matplotlib loads only when a plot
is drawn."""

from autotune.outputs.export import FORMATS, ExportResult, export, export_plan, write_export
from autotune.outputs.plots import (
    plot_curve, plot_history, plot_memory, plot_pareto, plot_timeline, write_run_plots)

__all__ = ["FORMATS", "ExportResult", "export", "export_plan", "write_export", "plot_curve", "plot_history",
           "plot_memory", "plot_pareto", "plot_timeline", "write_run_plots"]
