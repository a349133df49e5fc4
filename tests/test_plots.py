"""Run-directory plots: the pipeline schedule simulation behind the timeline (checked against the
cost model's pipeline formulas), the drawn geometry, and real PNG files."""

from __future__ import annotations

from dataclasses import replace

import random
from pathlib import Path
import struct

import pytest

from autotune.search.evaluate import evaluate
from autotune.cost.pipeline import inflight_microbatches, pipeline_time_s
from autotune.outputs.plots import (
    MEMORY_CLASSES, memory_figure, pareto_front, plot_history, plot_memory, plot_pareto, plot_timeline,
    stage_pass_times_s, timeline_figure, write_run_plots)
from autotune.outputs.schedule import interleaved_group_size, simulate_schedule
from autotune.plan.builders import uniform_plan

SCHEDULES = [(4, 8, "1f1b", 1), (4, 8, "gpipe", 1), (4, 8, "interleaved", 2), (3, 7, "1f1b", 1),
             (4, 10, "interleaved", 2), (2, 6, "interleaved", 3), (1, 5, "1f1b", 1), (6, 3, "1f1b", 1)]


@pytest.mark.parametrize("stages, microbatches, schedule, vpp", SCHEDULES)
def test_simulated_schedule_takes_the_cost_model_time(stages, microbatches, schedule, vpp):
    blocks = simulate_schedule([1.0] * stages, [2.0] * stages, microbatches, schedule, vpp)
    assert len(blocks) == stages * microbatches * 2 * vpp
    span = max(b.end_s for b in blocks)
    assert span == pytest.approx(pipeline_time_s([3.0] * stages, microbatches, schedule, vpp))


@pytest.mark.parametrize("stages, microbatches, schedule, vpp",
                         [s for s in SCHEDULES if s[2] != "interleaved" or s[1] % s[0] == 0])
def test_simulated_schedule_holds_the_cost_model_in_flight_micro_batches(stages, microbatches, schedule, vpp):
    blocks = simulate_schedule([1.0] * stages, [2.0] * stages, microbatches, schedule, vpp)
    for s in range(stages):
        events = sorted([(b.start_s, 1) for b in blocks if b.stage == s and b.kind == "F"]
                        + [(b.end_s, -1) for b in blocks if b.stage == s and b.kind == "B"])
        held = peak = 0
        for _, change in events:
            held += change
            peak = max(peak, held)
        assert peak / vpp == pytest.approx(inflight_microbatches(s, stages, microbatches, schedule, vpp))


def test_simulated_schedule_respects_order_and_dependencies():
    rng = random.Random(7)
    fwd = [rng.uniform(0.5, 2.0) for _ in range(4)]
    bwd = [2 * f * rng.uniform(0.8, 1.2) for f in fwd]
    blocks = simulate_schedule(fwd, bwd, 8, "interleaved", 2)
    at = {(b.kind, b.stage, b.microbatch, b.chunk): b for b in blocks}
    for b in blocks:
        if b.kind == "F" and b.stage > 0:
            assert b.start_s >= at[("F", b.stage - 1, b.microbatch, b.chunk)].end_s
        if b.kind == "B" and b.stage < 3:
            assert b.start_s >= at[("B", b.stage + 1, b.microbatch, b.chunk)].end_s
        assert b.end_s - b.start_s == pytest.approx((fwd if b.kind == "F" else bwd)[b.stage] / 2)
    for s in range(4):
        mine = sorted((b.start_s, b.end_s) for b in blocks if b.stage == s)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(mine, mine[1:])), "a rank runs one block at a time"


def test_interleaved_groups_follow_megatron_rules():
    assert interleaved_group_size(4, 8) == 4
    assert interleaved_group_size(4, 10) == 5  # 10 % 4 = 2 < 4 leaves a short last group
    assert interleaved_group_size(4, 9) == 5  # groups 5 + 4: the last group holds at least pp
    with pytest.raises(ValueError, match="num_microbatches"):
        interleaved_group_size(4, 3)


@pytest.fixture(scope="module")
def large_plan():
    plan = uniform_plan(num_layers=36, gpus=16, tp=2, pp=4, vpp=3, micro_batch=8, global_batch=128,
                        sequence_parallel=True, recompute="full")
    return plan, evaluate("large", plan=plan)


def test_timeline_draws_every_block_where_the_schedule_puts_it(large_plan):
    plan, estimate = large_plan
    fwd, bwd = stage_pass_times_s(plan, estimate)
    assert [f + b for f, b in zip(fwd, bwd)] == pytest.approx([s.microbatch_time_s for s in estimate.stages])
    assert bwd[0] == pytest.approx(3 * fwd[0])  # full recomputation repeats the forward
    blocks = simulate_schedule(fwd, bwd, plan.num_microbatches, plan.schedule, plan.vpp)
    fig = timeline_figure(blocks, plan.pp)
    bars = [c for c in fig.axes[0].collections if c.get_gid() == "blocks"]
    assert sum(len(c.get_paths()) for c in bars) == plan.pp * plan.num_microbatches * 2 * plan.vpp
    drawn_end_ms = max(p.vertices[:, 0].max() for c in bars for p in c.get_paths())
    assert drawn_end_ms == pytest.approx(max(b.end_s for b in blocks) * 1e3)


def test_partial_recomputation_repeats_its_share_of_the_forward(large_plan):
    plan, _ = large_plan
    partial = replace(plan, stages=tuple(replace(s, recompute_layers=3) for s in plan.stages))  # 3 of 9 layers
    fwd, bwd = stage_pass_times_s(partial, evaluate("large", plan=partial))
    assert bwd[0] == pytest.approx((2 + 3 / 9) * fwd[0])


def test_memory_bars_stack_to_each_stage_peak(large_plan):
    _, estimate = large_plan
    ax = memory_figure(estimate).axes[0]
    heights = [0.0] * len(estimate.stages)
    for container in ax.containers:
        for i, bar in enumerate(container):
            heights[i] += bar.get_height()
    on_hbm = [sum(s.memory_bytes[k] for k, _ in MEMORY_CLASSES) / 2**30 for s in estimate.stages]
    assert heights == pytest.approx(on_hbm)
    assert on_hbm == pytest.approx([s.peak_memory_bytes / 2**30 for s in estimate.stages])


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plots_are_real_pngs(large_plan, tmp_path):
    plan, estimate = large_plan
    candidates = [(1e5 * (1 + i % 5), 2**30 * (10 + 3 * i), f"c{i}") for i in range(20)]
    history = [(i, None if i % 4 == 3 else float(i * (7 - i % 7))) for i in range(30)]
    paths = write_run_plots(tmp_path / "run", plan=plan, estimate=estimate, candidates=candidates, history=history)
    assert sorted(paths) == ["history", "memory", "pareto", "timeline"]
    for name, path in paths.items():
        width, height = _png_size(path)
        assert path.name == f"{name}.png" and 400 <= width <= 3000 and 200 <= height <= 2000
        assert path.stat().st_size > 5000
    assert not list((tmp_path / "run").glob(".*"))  # no temporary file left behind
    assert _png_size(plot_memory(estimate, tmp_path / "m.png")) == _png_size(paths["memory"])
    assert plot_pareto(candidates, tmp_path / "p.png").exists() and plot_history(history, tmp_path / "h.png").exists()
    assert plot_timeline(plan, estimate, tmp_path / "t.png").exists()


def test_pareto_front_matches_brute_force():
    rng = random.Random(3)
    for _ in range(50):
        points = [(rng.choice([1.0, 2.0, 3.0, rng.random()]), rng.choice([1.0, 2.0, rng.random()]))
                  for _ in range(rng.randint(1, 12))]
        dominated = {i for i, (t, m) in enumerate(points)
                     if any((t2 >= t and m2 <= m) and (t2, m2) != (t, m) for t2, m2 in points)}
        front = pareto_front(points)
        kept = {points[i] for i in front}
        assert kept == {p for i, p in enumerate(points) if i not in dominated}
        assert len(front) == len(kept)  # one index per distinct point
        assert [points[i][1] for i in front] == sorted(points[i][1] for i in front)


# Plots of a search's run directory (autotune.outputs.search_run, called by autotune.search.api).

@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    from autotune.search.api import search

    run = tmp_path_factory.mktemp("runs") / "run"
    return run, search("small", 4, run_dir=run, cache=False)


def _run_study(run):
    import optuna

    url = f"sqlite:///{run / 'study.db'}"
    (summary,) = optuna.get_all_study_summaries(url)
    return optuna.load_study(study_name=summary.study_name, storage=url)


def test_a_search_run_directory_has_the_plots_its_report_names(search_run):
    from autotune.outputs.search_run import PLOT_FILES

    run, result = search_run
    assert result.run_dir == str(run)
    for name in PLOT_FILES:
        width, height = _png_size(run / f"{name}.png")
        assert 400 <= width <= 3000 and 200 <= height <= 2000
    report = (run / "report.md").read_text()
    assert report.startswith("# Plan for small") and report.count("## Plots") == 1
    assert [line.split("`")[1] for line in report.split("## Plots")[1].splitlines() if line.startswith("- ")] == \
        [f"{name}.png" for name in PLOT_FILES]


def test_run_plots_draw_the_plan_study_and_the_candidates(search_run):
    from autotune.outputs.search_run import pareto_points
    from autotune.search.store import slice_history

    run, result = search_run
    history = slice_history(_run_study(run))
    assert [n for n, _ in history] == list(range(1, result.stats.num_slices + 1))
    values = [v for _, v in history if v is not None]
    assert 0 < len(values) <= result.stats.num_slices_solved  # pruned slices have no value
    candidates, baselines = pareto_points(result)
    points = candidates + baselines
    fitting = [e for _, e in result.candidates if e.fits] + [b.estimate for b in result.baselines
                                                              if b.estimate is not None and b.estimate.fits]
    assert sorted(p[:2] for p in points) == sorted((e.tokens_per_s, e.peak_memory_bytes_per_gpu) for e in fitting)
    assert max(p[0] for p in points) == pytest.approx(result.estimate.tokens_per_s)
    if result.stats.best_from == "search":
        assert min(values) == pytest.approx(result.estimate.step_time_s)


def test_the_run_study_opens_with_optuna_load_study(search_run):
    run, result = search_run
    study = _run_study(run)
    assert len(study.trials) == result.stats.num_slices
    assert study.user_attrs["problem"]["model"]["name"] == "small"


def test_the_run_study_opens_in_optuna_dashboard(search_run):
    """What `optuna-dashboard sqlite:///RUN/study.db` serves (pip install -e '.[dashboard]')."""
    import json
    from wsgiref.util import setup_testing_defaults

    dashboard = pytest.importorskip("optuna_dashboard")
    run, result = search_run
    app = dashboard.wsgi(f"sqlite:///{run / 'study.db'}")

    def get(path: str) -> dict:
        environ, status = {"PATH_INFO": path}, []
        setup_testing_defaults(environ)
        body = b"".join(app(environ, lambda code, headers, exc_info=None: status.append(code)))
        assert status == ["200 OK"], body[:500]
        return json.loads(body)

    (summary,) = get("/api/studies")["study_summaries"]
    assert summary["study_name"] == _run_study(run).study_name
    detail = get(f"/api/studies/{summary['study_id']}")
    assert len(detail["trials"]) == result.stats.num_slices


def test_a_plotting_failure_is_one_line_and_keeps_the_run(tmp_path, monkeypatch, capsys):
    import autotune.outputs.plots as plots
    from autotune.search.api import search

    def broken(*args, **kwargs):
        raise RuntimeError("no fonts here")

    monkeypatch.setattr(plots, "write_run_plots", broken)
    result = search("small", 2, run_dir=tmp_path / "run")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plots not written" in err and "no fonts here" in err
    kept = {p.name for p in (tmp_path / "run").iterdir() if not p.name.startswith("study.db-")}  # -wal, -shm: open
    assert kept == {"plan.json", "search.json", "report.md", "study.db"}
    assert "## Plots" not in (tmp_path / "run" / "report.md").read_text() and result.run_dir == str(tmp_path / "run")


# Readable at scale: a summarised timeline, an inference timeline and memory plot, a Pareto plot
# with the chosen plan and baselines marked and labels that do not overlap.

def test_a_long_interleaved_timeline_is_summarised_with_bubble_and_step_time(tmp_path):
    from autotune.outputs.plots import drawn_microbatches

    plan = uniform_plan(num_layers=96, gpus=64, tp=8, pp=8, vpp=4, micro_batch=1, global_batch=48,
                        sequence_parallel=True, recompute="selective")
    estimate = evaluate("gpt3-175b", plan=plan, global_batch=48, seq_len=2048)
    assert plan.num_microbatches == 48 and drawn_microbatches(plan) == 16
    path = plot_timeline(plan, estimate, tmp_path / "t.png")
    fwd, bwd = stage_pass_times_s(plan, estimate)
    blocks = simulate_schedule(fwd, bwd, 16, plan.schedule, plan.vpp)
    fig = timeline_figure(blocks, plan.pp, note="x")
    bars = [c for c in fig.axes[0].collections if c.get_gid() == "blocks"]
    assert sum(len(c.get_paths()) for c in bars) == 8 * 16 * 2 * 4
    from autotune.outputs.plots import _timeline_note

    note = _timeline_note(plan, estimate, 16)
    share = 100 * estimate.breakdown["pipeline_bubble_s"] / estimate.step_time_s
    assert "16 of 48 micro-batches" in note and f"{share:.1f}%" in note and f"step {estimate.step_time_s:.3f} s" in note
    assert path.exists()


def test_inference_plots_have_no_backward_and_label_the_kv_cache():
    from autotune.spec.presets import load_preset
    from autotune.spec.resolve import inference_workload

    plan = uniform_plan(num_layers=32, gpus=8, tp=2, pp=2, micro_batch=4, global_batch=16)
    work = inference_workload(load_preset("llama3-8b"), "decode", batch=16, prompt_len=512, output_len=64)
    estimate = evaluate("llama3-8b", plan=plan, workload=work)
    from autotune.outputs.plots import _is_inference

    assert _is_inference(estimate)
    ax = memory_figure(estimate).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "KV cache + activations" in labels and "gradients" not in labels and "optimizer states" not in labels


def test_pareto_marks_the_chosen_plan_and_baselines_without_overlapping_labels(tmp_path, monkeypatch):
    from autotune.outputs import pareto_plot as plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or Path(path))
    rng = random.Random(1)
    points = [(1e5 * (1 + rng.random()), 2**30 * (10 + 60 * rng.random()), f"plan {i}") for i in range(60)]
    points += [(2e5 + i, 2**30 * (30 + 0.01 * i), f"close {i}") for i in range(6)]  # a tight cluster
    plots.plot_pareto(points, tmp_path / "p.png", chosen=points[-1], baselines=[(1.2e5, 2**30 * 40, "megatron-rule"),
                                                                                  (1.1e5, 2**30 * 45, "data-parallel")])
    (fig,) = figures
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"chosen plan", "baseline megatron-rule", "baseline data-parallel", "Pareto front"} <= set(legend)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert boxes and all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    key = next(t for t in fig.texts if t.get_gid() == "pareto-key").get_text()
    assert "*: close 5" in key and key.count("\n") - 1 >= len(ax.texts) >= 3  # a crowded label is left out


def test_pareto_shows_a_baseline_that_is_the_chosen_plan_and_spans_the_points(tmp_path, monkeypatch):
    """The data-parallel baseline that is the chosen plan is not hidden under its star, and the
    memory axis spans the points (4-13 GiB), not the 80 GiB capacity (issue 30)."""
    from autotune.outputs import pareto_plot

    figures = []
    monkeypatch.setattr(pareto_plot, "_save", lambda fig, path: figures.append(fig) or Path(path))
    points = [(2.1e5, 4 * 2**30, "a"), (7.5e5, 7 * 2**30, "b"), (1.39e6, 12.6 * 2**30, "c")]
    chosen = points[-1]
    pareto_plot.plot_pareto(points, tmp_path / "p.png", capacity_bytes=80 * 2**30, chosen=chosen,
                            baselines=[(1.39e6, 12.6 * 2**30, "data-parallel"), (7.9e5, 6.6 * 2**30, "megatron-rule")])
    (fig,) = figures
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "baseline data-parallel (= the chosen plan)" in legend and "baseline megatron-rule" in legend
    star = next(c for c in ax.collections if c.get_label() == "chosen plan")
    ring = next(c for c in ax.collections if c.get_label().startswith("baseline data-parallel"))
    assert ring.get_zorder() > star.get_zorder() and len(ring.get_facecolors()) == 0  # hollow, on top
    left, right = ax.get_xlim()
    assert left == 0 and 12.6 < right < 20  # the points fill the axis
    assert any("capacity 80 GiB" in t.get_text() for t in ax.texts)  # the capacity, off the axis, is named
    pareto_plot.plot_pareto(points, tmp_path / "q.png", capacity_bytes=16 * 2**30, chosen=chosen)
    near = figures[-1].axes[0]
    assert near.get_xlim()[1] >= 16 and any(line.get_label() == "capacity 16 GiB" for line in near.lines)


def test_one_stage_timeline_names_its_bars_and_draws_the_whole_step(tmp_path, monkeypatch):
    """A one-stage plan's timeline is not two bars with tiny numbers: each bar says what it is
    and how long it takes, and the rest of the step (gradient sync, optimizer) is drawn, so the
    axis ends at the step time (issue 30)."""
    import autotune
    from autotune.outputs import plots
    from autotune.plan.builders import uniform_plan

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or Path(path))
    plan = uniform_plan(num_layers=36, gpus=16, global_batch=128, has_embeddings=True, micro_batch=8)
    estimate = autotune.evaluate("large", 16, plan=plan)
    plots.plot_timeline(plan, estimate, tmp_path / "t.png")
    ax = figures[0].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("forward (micro-batch 0): ") for t in texts)
    assert any(t.startswith("backward (micro-batch 0): ") for t in texts)
    assert ax.get_xlim()[1] == pytest.approx(estimate.step_time_s * 1e3)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "rest of the step" in legend
    note = next(t for t in figures[0].texts if t.get_gid() == "timeline-note").get_text()
    assert "rest of the step (grey)" in note and "gradient sync" in note and "bubble" not in note
