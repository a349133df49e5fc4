"""Text and files a finished search produces: report.md, and the plots of its run directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from autotune.outputs.report import report_markdown

__all__ = ["report_for", "context_lines", "workload_text", "pareto_points", "write_search_plots", "PLOT_FILES",
           "render_run_plots", "plots_in_background"]

# The run directory's plots and what each shows (listed in report.md).
PLOT_FILES = {"timeline": "the pipeline schedule of the plan", "memory": "memory per GPU of each stage by class",
              "pareto": "tokens/s against peak memory of each slice's best plan and the baselines",
              "history": "each slice's step time in the order the slices were solved, and the best so far"}
INFERENCE_PLOT_FILES = {**PLOT_FILES, "timeline": "one replica's batch over time: the prefill (TTFT), then each decode step (TPOT)",
                        "memory": "memory per GPU of each stage by class, the KV cache with the activations",
                        "pareto": "TPS against peak memory of each slice's best plan and the baselines",
                        "history": "each slice's time for the whole batch in the order the slices were solved, and the best so far"}


def _history_axes(estimate) -> dict:
    what = "time for the batch (s)" if estimate.inference is not None else "step time (s)"
    return {"maximize": False, "ylabel": what, "xlabel": "slice (in the order solved)"}


def workload_text(workload) -> str:
    """The workload in its own terms: a training step's batch, or what is served and its targets."""
    from autotune.outputs.serving_report import workload_line
    from autotune.spec.workload import is_training

    w = workload
    if not is_training(w):
        return workload_line(w)
    return f"training, global batch {w.global_batch} x {w.seq_len} tokens, {w.dtype}, attention {w.attention_impl}"


def context_lines(problem) -> list[str]:
    m, c = problem.model, problem.cluster
    return [f"model: {m.name} ({m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads)",
            f"workload: {workload_text(problem.workload)}",
            f"runtime: {problem.runtime.name} ({problem.runtime.description})",
            f"cluster: {c.name}, {problem.gpus} x {c.device.name} ({c.gpus_per_node} per node)",
            f"runtime: {problem.runtime.name}",
            f"search: space {problem.space.name}, method {problem.method}, seed {problem.seed}"]


def report_for(problem, result) -> str:
    from autotune.spec.workload import is_training

    kind = "Plan" if is_training(problem.workload) else f"{problem.workload.kind.capitalize()} plan"
    return report_markdown(title=f"{kind} for {problem.model.name} on {problem.gpus} GPUs", plan=result.plan,
                           estimate=result.estimate, capacity_bytes=problem.cluster.device.memory_bytes,
                           baselines=result.baselines, context=context_lines(problem), stats=vars(result.stats),
                           workload=problem.workload)


def pareto_points(result) -> tuple[list[tuple[float, float, str]], list[tuple[float, float, str]]]:
    """(tokens/s, peak memory bytes per GPU, label) of each slice's best plan, and of the
    baselines, those that fit."""
    from autotune.outputs.curve_report import plan_summary

    points = [(e.tokens_per_s, e.peak_memory_bytes_per_gpu, plan_summary(p)) for p, e in result.candidates if e.fits]
    return points, [(b.estimate.tokens_per_s, b.estimate.peak_memory_bytes_per_gpu, b.name) for b in result.baselines
                    if b.estimate is not None and b.estimate.fits]


def _record_points(record: dict) -> tuple[list[tuple[float, float, str]], list[tuple[float, float, str]]]:
    """Pareto points of a finished run from search.json: each slice's best plan (as the search
    recorded them from its study), and the baselines."""
    from autotune.outputs.curve_report import plan_summary
    from autotune.plan.plan import Plan

    points = [(p["tokens_per_s"], p["peak_memory_bytes_per_gpu"], plan_summary(Plan.from_dict(p["plan"])))
              for p in record.get("slice_points", ())]
    baselines = []
    for baseline in record.get("baselines", ()):
        e = baseline.get("estimate")
        if e and e.get("fits"):
            baselines.append((e["tokens_per_s"], e["peak_memory_bytes_per_gpu"], baseline["name"]))
    return points, baselines


def render_run_plots(run_dir: str | Path) -> list[str]:
    """Draw a finished run's plots from its files (plan.json, search.json) and add
    them to report.md: what ``plots_in_background`` runs after the search has returned."""
    from autotune.outputs.plots import write_run_plots
    from autotune.outputs.rescore import rescore
    from autotune.outputs.run_dir import load_search_record

    path, record = load_search_record(run_dir)
    plan_file, estimate = rescore(path)
    candidates, baselines = _record_points(record)
    paths = write_run_plots(path, plan=plan_file.plan, estimate=estimate, candidates=candidates, baselines=baselines,
                            history=[tuple(h) for h in record.get("slice_history", ())],
                            history_axes=_history_axes(estimate))
    names = [name for name in PLOT_FILES if name in paths]
    _add_plot_section(path, (path / "report.md").read_text().split("\n## Plots")[0].rstrip("\n") + "\n", names,
                      inference=estimate.inference is not None)
    return [f"{name}.png" for name in names]


def plots_in_background(run_dir: Path) -> None:
    """Start drawing a run's plots in a detached process: the search returns without waiting
    for matplotlib (about a second); the PNGs appear in the run directory moments later."""
    import subprocess

    try:
        log = open(run_dir / "plots.log", "w")  # noqa: SIM115  (kept open by the child process)
    except OSError as err:  # a full disk: the run itself is written; only its plots are missing
        sys.stderr.write(f"autotune: plots not drawn in {run_dir}: {err.strerror}\n")
        return
    subprocess.Popen([sys.executable, "-m", "autotune.outputs.search_run", str(run_dir)], stdin=subprocess.DEVNULL,
                     stdout=log, stderr=log, start_new_session=True)


def _add_plot_section(run_dir: Path, report: str, names: list[str], *, inference: bool) -> None:
    from autotune.plan.io import atomic_write_text

    described = INFERENCE_PLOT_FILES if inference else PLOT_FILES
    section = ["", "## Plots", "", *[f"- `{name}.png`: {described[name]}" for name in names]]
    atomic_write_text(run_dir / "report.md", report + "\n".join(section) + "\n")


def write_search_plots(run_dir: Path, result, history, *, report: str) -> list[str]:
    """timeline.png, memory.png, pareto.png and history.png into ``run_dir``, then report.md again
    with a section naming them. Called after the run's records are written: a plotting failure
    is one line on stderr and the run stays complete."""
    from autotune.outputs.plots import write_run_plots

    try:
        candidates, baselines = pareto_points(result)
        paths = write_run_plots(run_dir, plan=result.plan, estimate=result.estimate, candidates=candidates,
                                baselines=baselines,
                                history=history, history_axes=_history_axes(result.estimate))
    except Exception as err:  # noqa: BLE001  (any plotting error: the plan and report are already written)
        sys.stderr.write(f"autotune: plots not written to {run_dir}: {type(err).__name__}: {err}\n")
        return []
    names = [name for name in PLOT_FILES if name in paths]
    _add_plot_section(run_dir, report, names, inference=result.estimate.inference is not None)
    return [f"{name}.png" for name in names]


if __name__ == "__main__":  # python -m autotune.outputs.search_run RUN_DIR: draw a run's plots
    try:  # at low priority: the user's next command (another search, say) gets the cores first
        os.nice(10)
    except (AttributeError, OSError):  # not POSIX, or not permitted: at the usual priority
        pass
    render_run_plots(sys.argv[1])
    Path(sys.argv[1], "plots.log").unlink(missing_ok=True)  # kept only when drawing failed
