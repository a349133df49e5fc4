"""Scaling curves: ``autotune.scaling_curve`` (each point is the search's answer at that count,
efficiency against the smallest fitting count, the knee) and ``autotune curve`` (table, JSON, run
directory with curve.json and curve.png, bad input as one line with exit code 2)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

import autotune
from autotune.cli.main import main
from autotune.errors import AutotuneError
from autotune.outputs.curve_report import curve_table, plan_summary
from autotune.outputs.plots import curve_figure
from autotune.search.curve import parse_gpu_list
from autotune.search.api import search


@pytest.fixture(scope="module")
def small_curve():
    return autotune.scaling_curve("small", [4, 1, 2, 2])


@pytest.fixture(scope="module")
def partly_fitting_curve():
    """llama3-70b fits on no single A100 (not even with offload), on 8 it does."""
    return autotune.scaling_curve("llama3-70b", [1, 8], cluster="dgx-a100-80gb")


def test_each_point_is_the_search_answer_at_its_count(small_curve):
    assert [p.gpus for p in small_curve.points] == [1, 2, 4]  # sorted, once each
    for point in small_curve.points:
        fresh = search("small", point.gpus, cache=False)
        assert point.plan == fresh.plan and point.estimate.step_time_s == fresh.estimate.step_time_s


def test_efficiency_is_per_gpu_throughput_against_the_smallest_count_and_the_knee_the_last_above(small_curve):
    base = small_curve.points[0].tokens_per_s
    for point in small_curve.points:
        assert point.efficiency == pytest.approx(point.tokens_per_s / point.gpus / base)
    above = [p.gpus for p in small_curve.points if p.efficiency >= small_curve.efficiency_threshold]
    assert small_curve.knee_gpus == max(above)
    strict = autotune.scaling_curve("small", [1, 2, 4], efficiency_threshold=1.0)  # cached results: a lookup
    assert strict.knee_gpus == max(p.gpus for p in strict.points if p.efficiency >= 1.0)


def test_a_count_where_nothing_fits_is_a_point_with_a_note(partly_fitting_curve):
    one, eight = partly_fitting_curve.points
    assert one.estimate is None and one.plan is None and one.efficiency == 0.0 and "needs at least" in one.note
    assert eight.estimate.fits and eight.efficiency == pytest.approx(1.0) and partly_fitting_curve.knee_gpus == 8
    row = next(line for line in curve_table(partly_fitting_curve) if line.split()[0] == "1")
    assert "nothing fits: " in row and one.note in row


@pytest.mark.parametrize("text, message", [("1,0,4", "positive"), ("2,-8", "positive"), ("1,x", "comma-separated"),
                                           ("", "at least one"), (" , ", "at least one")])
def test_parse_gpu_list_refuses_bad_counts(text, message):
    with pytest.raises(AutotuneError, match=message) as err:
        parse_gpu_list(text)
    assert err.value.field == "gpus"


def test_counts_the_cluster_cannot_form_are_refused_before_any_search():
    from autotune.search.cache import PLAN_CACHE

    misses = PLAN_CACHE.misses
    with pytest.raises(AutotuneError, match="12 GPUs cannot be formed") as err:
        autotune.scaling_curve("small", [1, 12, 16])
    assert err.value.field == "gpus" and PLAN_CACHE.misses == misses


def test_the_plot_draws_the_curve_and_marks_the_knee(small_curve, partly_fitting_curve):
    ax = curve_figure(small_curve).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["tokens/s"].get_ydata()) == pytest.approx([p.tokens_per_s for p in small_curve.points])
    assert list(lines["knee: %d GPUs (efficiency >= 80%%)" % small_curve.knee_gpus].get_xdata()) == \
        [small_curve.knee_gpus] * 2
    efficiency = curve_figure(small_curve).axes[1].get_lines()[0]
    assert list(efficiency.get_ydata()) == pytest.approx([100 * p.efficiency for p in small_curve.points])
    crosses = {line.get_label(): line for line in curve_figure(partly_fitting_curve).axes[0].get_lines()}
    assert list(crosses["nothing fits"].get_xdata()) == [1]


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_cli_prints_the_table_and_writes_the_run_directory(tmp_path, capsys, small_curve):
    assert main(["curve", "--model", "small", "--gpus", "1,2,4", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (run,) = tmp_path.iterdir()
    assert run.name.endswith("-small-curve") and {p.name for p in run.iterdir()} == {"curve.json", "curve.png"}
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0].isdigit()}
    assert sorted(rows, key=int) == ["1", "2", "4"]
    assert plan_summary(small_curve.points[2].plan) in rows["4"]
    assert f"knee: {small_curve.knee_gpus} GPU" in out and f"curve.png: {run / 'curve.png'}" in out
    record = json.loads((run / "curve.json").read_text())
    assert record["knee_gpus"] == small_curve.knee_gpus and record["inputs"]["gpus"] == [1, 2, 4]
    assert [p["tokens_per_s"] for p in record["points"]] == pytest.approx([p.tokens_per_s for p in small_curve.points])
    width, height = _png_size(run / "curve.png")
    assert 600 <= width <= 3000 and 300 <= height <= 2000


def test_cli_json_without_a_run_directory(tmp_path, capsys, small_curve):
    assert main(["curve", "--model", "small", "--gpus", "4,2,1", "--json", "--no-run-dir",
                 "--runs-dir", str(tmp_path / "runs")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"] == {} and not (tmp_path / "runs").exists()
    assert data["model"] == "small" and [p["gpus"] for p in data["points"]] == [1, 2, 4]
    assert [p["plan"] for p in data["points"]] == [json.loads(p.plan.to_json()) for p in small_curve.points]


@pytest.mark.parametrize("args, field", [
    (["--gpus", "1,0,4"], "gpus"), (["--gpus", "1,-2"], "gpus"), (["--gpus", "1,two"], "gpus"), (["--gpus", ""], "argument --gpus"),
    (["--gpus", "1,12"], "gpus"), (["--gpus", "1,2", "--threshold", "1.5"], "threshold"),
    (["--gpus", "1,2", "--cluster", "dgx-z100"], "cluster"), (["--gpus", "1,2", "--model", "nope"], "model"),
])
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, field):
    argv = ["curve", "--model", "small", *args, "--runs-dir", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {field}" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_cli_entry_point_exit_code():
    proc = subprocess.run([sys.executable, "-m", "autotune", "curve", "--model", "small", "--gpus", "4,x"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "gpus" in proc.stderr
