"""The 1,000-prompt vLLM bursts' last seconds: which requests end the model's run, and how long the published run
let its longest ones be.

For each run of tests/data/vllm_burst_published.toml, priced as its check row (tests/data/vllm_newer_check.csv):
the published duration, generated tokens and peak second beside the model's; when the model's run had generated
99% of its tokens; its two longest requests (output tokens, first token and last token, s); and the model's
duration and output tok/s error with every drawn output cut at each CAP tokens (a what-if on the draw, not on
the engine: the prompts, the TTFT and the steps are the model's). A run whose published duration sits below the
end of the model's second-longest request while the model's peak second is at or above the published one
cannot be met by a faster step: its own longest outputs were shorter than the draw's. A diagnosis, nothing
fitted or priced: docs/serving.md, "The Qwen3-235B bursts' tail".

  python scripts/diag_burst_tail.py [--caps 1400,1200,1000,800] [RUN ...]
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import arrival_draws
from autotune.cost.serving_lengths import RequestLengths

_SPEC = importlib.util.spec_from_file_location("diag_vllm_burst", Path(__file__).with_name("diag_vllm_burst.py"))
burst = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(burst)


def capped(lengths: RequestLengths, cap_tokens: int) -> RequestLengths:
    """``lengths`` with every output quantile cut at ``cap_tokens`` (prompts as they are)."""
    outputs = tuple(min(q, float(cap_tokens)) for q in lengths.output_tokens)
    return replace(lengths, name=f"{lengths.name} (outputs cut at {cap_tokens})", output_tokens=outputs)


def simulate(row: dict, cap_tokens: int | None = None) -> tuple:
    """The row's last simulated pass (its trace), every decode token's client time (s) and the API server's
    streaming ceiling, tok/s (1 / the preset's frontend_s_per_seq: one process streams every token)."""
    case = case_from_row(row)
    load = case.load
    if cap_tokens is not None:
        load = replace(load, lengths=capped(load.lengths, cap_tokens))
    with burst._TokenStamps() as stamps:
        trace = arrival_draws(case.deployment, load)[-1].trace
    tokens = np.sort(np.concatenate(stamps.times)) if stamps.times else np.zeros(0)
    per_token_s = case.deployment.runtime.serving.frontend_s_per_seq
    return trace, tokens, (1.0 / per_token_s if per_token_s else float("inf"))


def seconds_at_ceiling(tokens: np.ndarray, ceiling_tok_s: float) -> int:
    """Whole seconds from the run's start in which the model streamed within 5% of the API server's ceiling."""
    if len(tokens) == 0 or not np.isfinite(ceiling_tok_s):
        return 0
    return int((np.bincount(np.floor(tokens).astype(int)) >= 0.95 * ceiling_tok_s).sum())


def tail_lines(name: str, run: dict, row: dict, caps: list[int]) -> list[str]:
    """The run's lines: published, model, its longest requests, and the capped what-ifs."""
    trace, tokens, ceiling = simulate(row)
    ends = trace.first_token_s + trace.tpot_s * np.maximum(trace.output_len - 1, 0)
    last = np.argsort(ends)[::-1][:2]
    published_rate = run["generated_tokens"] / run["duration_s"]
    model_rate = float(trace.output_len.sum()) / trace.duration_s
    peak = burst.peak_output_tok_s(trace.first_token_s, tokens)
    lines = [f"{name} ({run['row']})",
             f"  published duration {run['duration_s']:.1f} s, {run['generated_tokens']} tokens, "
             f"{published_rate:.0f} tok/s, peak {run.get('peak_output_tok_s', float('nan')):.0f}",
             f"  model     duration {trace.duration_s:.1f} s, {int(trace.output_len.sum())} tokens, "
             f"{model_rate:.0f} tok/s ({100 * (model_rate / published_rate - 1):+.1f}%), peak {peak:.0f}, "
             f"99% of tokens by {tokens[int(0.99 * (len(tokens) - 1))]:.1f} s",
             f"  API server ceiling {ceiling:.0f} tok/s: {seconds_at_ceiling(tokens, ceiling)} s of the model's run "
             "within 5% of it",
             "  longest: " + "; ".join(f"{int(trace.output_len[i])} tokens {trace.first_token_s[i]:.1f} -> "
                                        f"{ends[i]:.1f} s" for i in last)]
    for cap in caps:
        t, _, _ = simulate(row, cap)
        rate = float(t.output_len.sum()) / t.duration_s
        lines.append(f"  outputs cut at {cap}: duration {t.duration_s:.1f} s, {rate:.0f} tok/s "
                     f"({100 * (rate / published_rate - 1):+.1f}%)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help="run names of tests/data/vllm_burst_published.toml (default: "
                                                "every ShareGPT burst)")
    parser.add_argument("--caps", default="1400,1200,1000,800", help="output cuts to try, tokens, comma-separated")
    args = parser.parse_args()
    runs, rows = burst.published_runs(), burst.check_rows()
    names = args.runs or [n for n, r in runs.items() if not rows[r["row"]]["isl"]]
    caps = [int(c) for c in args.caps.split(",") if c]
    for name in names:
        print("\n".join(tail_lines(name, runs[name], rows[runs[name]["row"]], caps)))


if __name__ == "__main__":
    main()
