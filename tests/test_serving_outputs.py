"""Serving and inference answers in their own terms (issue 30): a serve search's terminal output,
report.md, `autotune show` and `explain` speak of requests, TPS, TPOT, TTFT and the KV cache,
say whether each target holds and by how much, and print no training words (global batch,
recomputation or ZeRO columns, MFU, training baselines); the timeline is the batch's phases to
scale, decode-dominated for a serving batch."""

from __future__ import annotations

import json

import pytest

from autotune.cli.main import main
from autotune.cost.estimate import InferenceMetrics
from autotune.outputs.serving_plots import phase_spans, serving_timeline_figure
from autotune.outputs.serving_report import target_lines
from autotune.spec.workload import InferenceWorkload

SERVE = ["--model", "llama3-8b", "--gpus", "8", "--workload", "serve", "--concurrency", "64", "--prompt-len", "1024",
         "--output-len", "256", "--target-tpot-ms", "30"]
TRAINING_WORDS = ("workload: training", "global batch", "recompute", "zero", "MFU", "recomputation", "ZeRO")


@pytest.fixture(scope="module")
def serve_run(tmp_path_factory):
    """The run directory of the README's serving example."""
    runs = tmp_path_factory.mktemp("serve") / "runs"
    assert main(["search", *SERVE, "--runs-dir", str(runs), "--plots", "sync", "--quiet"]) == 0
    return next(runs.iterdir())


def _printed(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def test_search_output_says_whether_the_targets_hold(capsys):
    out = _printed(capsys, ["search", *SERVE, "--no-run-dir", "--quiet"])
    assert "TPOT" in out and "TTFT" in out and "KV cache" in out and "TPS" in out
    tpot = next(line for line in out.splitlines() if line.startswith("TPOT"))
    assert "meets the 30.00 ms target" in tpot and "to spare" in tpot
    assert "targets: every target holds" in out
    assert not [w for w in TRAINING_WORDS if w in out], out
    data = json.loads(_printed(capsys, ["search", *SERVE, "--no-run-dir", "--quiet", "--json"]))
    held = data["targets"]["tpot_s"]
    assert held["holds"] and held["target_s"] == 0.03 and held["margin_s"] == pytest.approx(0.03 - data["estimate"]["tpot_s"])


def test_report_show_and_explain_speak_serving(serve_run, capsys):
    report = (serve_run / "report.md").read_text()
    assert report.startswith("# Serve plan for llama3-8b on 8 GPUs")
    assert "- workload: serve 64 concurrent requests, 1024 prompt + 256 output tokens each" in report
    assert "targets TPOT <= 30.00 ms" in report and "meets the 30.00 ms target" in report
    assert "| baseline | TPS (tokens/s) | TPOT | TTFT |" in report
    assert not [w for w in TRAINING_WORDS if w in report], report
    assert _printed(capsys, ["show", str(serve_run)]).strip() == report.strip()
    explained = _printed(capsys, ["explain", str(serve_run)])
    assert "TPOT" in explained and "kv_cache+activations" in explained
    assert not [w for w in TRAINING_WORDS if w in explained], explained


def test_timeline_is_the_batch_to_scale_and_decode_dominated(serve_run):
    from autotune.outputs.rescore import rescore

    _, estimate = rescore(serve_run)
    spans = phase_spans(estimate)
    prefill = sum(e - s for kind, s, e in spans if kind == "prefill")
    decode = sum(e - s for kind, s, e in spans if kind == "decode")
    assert [kind for kind, _, _ in spans].count("decode") == 255
    assert prefill + decode == pytest.approx(estimate.step_time_s)
    assert decode > 3 * prefill  # 255 decode steps of one token against one prefill of 1024
    fig = serving_timeline_figure(estimate)
    ax = fig.axes[0]
    assert ax.get_xlim()[1] == pytest.approx(estimate.step_time_s * 1e3)  # the whole batch, in ms
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "TTFT" in texts and "255 decode steps x TPOT" in texts
    assert (serve_run / "timeline.png").stat().st_size > 0


def test_a_missed_target_says_by_how_much():
    workload = InferenceWorkload(batch=8, prompt_len=512, output_len=64, kind="serve", target_tpot_s=0.004,
                                 target_ttft_s=0.1)
    metrics = InferenceMetrics(tokens=512.0, tps=1000.0, time_per_token_s=1e-3, kv_cache_bytes_per_gpu=1.0,
                               kv_cache_bytes=2.0, decode_steps=63, meets_targets=False, ttft_s=0.05, tpot_s=0.005)
    tpot, ttft = target_lines(metrics, workload)
    assert tpot.startswith("TPOT  5.00 ms") and "MISSES the 4.00 ms target by 1.00 ms (25% over)" in tpot
    assert ttft.startswith("TTFT  50.00 ms") and "meets the 100.00 ms target, 50.00 ms (50%) to spare" in ttft
