"""The 1,000-prompt vLLM bursts: the model's TTFT / TPOT / ITL distributions beside the published ones.

Each run of tests/data/vllm_burst_published.toml is priced as its check row (tests/data/vllm_newer_check.csv)
is, and the simulated trace's mean / median / P99 of TTFT, TPOT and ITL, its duration and output tokens/s are
printed under the run's published figures, with the TTFT shift (published - model) at the mean, the median
and P99. A diagnosis, nothing fitted: docs/serving.md, "The 1,000-prompt bursts' distributions".

  python scripts/diag_vllm_burst.py [--extra-intake-ms X] [RUN ...]

``--extra-intake-ms X`` adds X ms of API-server work a request before it is sent to the engine core (all of it
before the request's first suspension, as a chat template's per-request parse is: vLLM 0.11.0
entrypoints/chat_utils.py apply_hf_chat_template runs resolve_chat_template_kwargs, then the template, before
_preprocess_chat awaits the tokenizer), to see what such a cost would move; the preset is not changed.
"""

from __future__ import annotations

import argparse
import csv
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np

import autotune.cost.serving_sim as serving_sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import arrival_draws
from autotune.cost.serving_load import weighted_percentile

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def published_runs() -> dict:
    """The runs of vllm_burst_published.toml, by name."""
    return tomllib.loads((DATA / "vllm_burst_published.toml").read_text())["runs"]


def check_rows() -> dict:
    with open(DATA / "vllm_newer_check.csv", newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _with_extra_intake(dep, extra_s: float):
    """``dep`` whose API server spends ``extra_s`` more a request, all of it before the request is sent."""
    s = dep.runtime.serving
    if extra_s <= 0 or not s.frontend_intake_s:
        return dep
    intake = s.frontend_intake_s + extra_s
    before = (s.frontend_intake_s * s.frontend_intake_before_send + extra_s) / intake
    serving = replace(s, frontend_intake_s=intake, frontend_intake_before_send=before)
    return replace(dep, runtime=replace(dep.runtime, serving=serving))


class _TokenStamps:
    """Every decode token's client time in the simulator's last pass (the shared loop plays the engine several
    times; each pass starts with serving_sim._initial), recorded around serving_sim._stamp_decodes. One token
    a step (the V1 presets' scheduler_steps 1)."""

    def __init__(self) -> None:
        self.times: list[np.ndarray] = []

    def __enter__(self) -> _TokenStamps:
        self._initial, self._stamp = serving_sim._initial, serving_sim._stamp_decodes

        def initial(req):
            self.times = []
            return self._initial(req)

        def stamp(st, decodes, ends, calls):
            before = st.generated[decodes].copy()
            self._stamp(st, decodes, ends, calls)
            got = st.generated[decodes] - before  # tokens each request took over the ends
            ends = np.atleast_1d(np.asarray(ends, dtype=float))
            counts = (got[None, :] > np.arange(len(ends))[:, None]).sum(axis=1)
            self.times.append(np.repeat(ends, counts))

        serving_sim._initial, serving_sim._stamp_decodes = initial, stamp
        return self

    def __exit__(self, *exc) -> None:
        serving_sim._initial, serving_sim._stamp_decodes = self._initial, self._stamp


def peak_output_tok_s(first_token_s: np.ndarray, token_s: np.ndarray) -> float:
    """vllm bench serve's 'Peak output token throughput' (0.11.0 benchmarks/serve.py calculate_metrics): the
    most tokens in any whole second counted from the run's start (all requests sent at 0)."""
    stamps = np.concatenate([first_token_s, token_s])
    return float(np.bincount(np.floor(stamps).astype(int)).max())


def model_stats(row: dict, extra_intake_s: float = 0.0) -> dict:
    """The simulated run's figures as the published ones are kept: ms triples (mean, median, P99), s, tok/s."""
    case = case_from_row(row)
    with _TokenStamps() as stamps:
        trace = arrival_draws(_with_extra_intake(case.deployment, extra_intake_s), case.load)[-1].trace
    tokens = np.concatenate(stamps.times) if stamps.times else np.zeros(0)
    ttft, tpot, gaps, weights = trace.ttft_s * 1e3, trace.tpot_s * 1e3, trace.itl_s * 1e3, trace.itl_weight

    def triple(x: np.ndarray) -> list[float]:
        return [float(x.mean()), float(np.median(x)), float(np.percentile(x, 99))]

    itl = [float(np.sum(gaps * weights) / np.sum(weights)), weighted_percentile(gaps, weights, 50),
           weighted_percentile(gaps, weights, 99)]
    return dict(ttft_ms=triple(ttft), tpot_ms=triple(tpot), itl_ms=itl, duration_s=trace.duration_s,
                output_tok_s=float(trace.output_len.sum()) / trace.duration_s,
                peak_output_tok_s=peak_output_tok_s(trace.first_token_s, tokens))


def _line(label: str, stats: dict) -> str:
    cells = "  ".join(f"{k[:-3].upper()} " + "/".join(f"{v:.0f}" for v in stats[k]) for k in ("ttft_ms", "tpot_ms", "itl_ms"))
    peak = f"  peak {stats['peak_output_tok_s']:.0f}" if "peak_output_tok_s" in stats else ""
    return f"  {label:9s} {cells}  duration {stats['duration_s']:.1f} s  {stats['output_tok_s']:.0f} tok/s{peak}"


def report(names: list[str], extra_intake_s: float) -> None:
    runs, rows = published_runs(), check_rows()
    for name in names or list(runs):
        run = runs[name]
        measured = dict(run, output_tok_s=run["generated_tokens"] / run["duration_s"])
        model = model_stats(rows[run["row"]], extra_intake_s)
        shift = [(a - b) / 1e3 for a, b in zip(measured["ttft_ms"], model["ttft_ms"])]
        print(f"{name} ({run['row']}; mean/median/P99, ms)")
        print(_line("published", measured))
        print(_line("model", model))
        print(f"  TTFT shift (published - model): {shift[0]:+.2f} / {shift[1]:+.2f} / {shift[2]:+.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help="run names of tests/data/vllm_burst_published.toml (default: all)")
    parser.add_argument("--extra-intake-ms", type=float, default=0.0,
                        help="API-server ms a request before it is sent, added to the preset's (a what-if)")
    args = parser.parse_args()
    report(args.runs, args.extra_intake_ms / 1e3)


if __name__ == "__main__":
    main()
