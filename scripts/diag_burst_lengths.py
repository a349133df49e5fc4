"""A burst row's simulated run by output length: duration, when its last requests finish, TTFT, and the mean /
median TPOT of its requests binned by output tokens (the short ones' TPOT is set by whole multi-step calls and
the prompt steps between them, the longest request sets the duration). A diagnosis, nothing fitted:
docs/serving.md, "vLLM PR #8050's rows after ShareGPT V3's own lengths".

    python scripts/diag_burst_lengths.py CSV ROW_ID [ROW_ID ...] [--lengths-toml FILE] [--pairs FILE.npz --seeds N]

``--lengths-toml FILE`` prices the rows with another serving_lengths.toml (an earlier table:
``git show b9ddae3~1:autotune/data/serving_lengths.toml > old.toml``). ``--pairs FILE.npz`` (arrays ``prompt``
and ``output``: the kept requests' token counts that scripts/sharegpt_lengths.py's ``kept_lengths`` returns)
draws each burst's requests as whole (prompt, output) pairs of the dataset, without replacement, over
``--seeds`` samples (numpy default_rng((seed, 7))), and prints each row's error spread: the dataset's own
prompt / output correlation instead of independent draws, and how much one sample's longest output moves it.
The rows' quoted totals are not applied to the pairs (they scale a table's draw).
"""

from __future__ import annotations

import argparse
import csv
import tomllib

import numpy as np

import autotune.cost.serving_lengths as serving_lengths
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving

BINS = (2, 11, 33, 100, 200, 400, 800, 100_000)  # output tokens; TPOT counts requests of more than one


def _use_table(path: str) -> None:
    table = tomllib.loads(open(path).read())
    serving_lengths._tables = lambda: table
    serving_lengths.request_lengths.cache_clear()


def _value(row: dict, trace) -> float:
    """The row's metric in its unit from the simulated trace (output tokens/s or mean TPOT in ms)."""
    if row["metric"] == "output_tokens_per_s":
        return float(trace.output_len.sum()) / trace.duration_s
    return float(trace.tpot_s.mean()) * 1e3


def describe(row: dict) -> str:
    case = case_from_row(row)
    t = run_serving(case.deployment, case.load).trace
    ends = np.sort(t.finish_s)
    last = np.argsort(t.finish_s)[-3:]
    lines = [f"{row['id']} {row['metric']} {row['value']}: model {_value(row, t):.2f}; lengths {case.load.lengths.name}",
             f"  duration {t.duration_s:.2f} s, {t.steps} steps, {t.mean_running:.1f} decoding on average; "
             f"{int(t.input_len.sum())} / {int(t.output_len.sum())} tokens",
             f"  finishes: median {np.median(ends):.2f} s, 10th-last {ends[-10]:.2f} s, last {ends[-1]:.2f} s; "
             f"last three: {t.output_len[last].tolist()} tokens from first tokens at "
             f"{[round(float(x), 2) for x in t.first_token_s[last]]} s",
             f"  TTFT mean / median / max {t.ttft_s.mean():.2f} / {np.median(t.ttft_s):.2f} / {t.ttft_s.max():.2f} s; "
             f"TPOT mean / median {t.tpot_s.mean() * 1e3:.1f} / {np.median(t.tpot_s) * 1e3:.1f} ms"]
    many = t.output_len > 1
    out, tpot = t.output_len[many], t.tpot_s * 1e3
    for lo, hi in zip(BINS, BINS[1:]):
        m = (out >= lo) & (out < hi)
        if m.any():
            lines.append(f"    output [{lo}, {hi}): {m.sum():4d} requests, TPOT mean {tpot[m].mean():6.1f} median "
                         f"{np.median(tpot[m]):6.1f} ms, {tpot[m].sum() / len(tpot):5.1f} ms of the mean")
    return "\n".join(lines)


def pair_spread(rows: list[dict], pairs_path: str, seeds: int) -> str:
    data = np.load(pairs_path)
    prompt, output = data["prompt"].astype(np.int64), data["output"].astype(np.int64)
    state = {"seed": 0}

    def draw(self, n: int, seed: int):
        i = np.random.default_rng((state["seed"], 7)).choice(len(prompt), n, replace=False)
        return prompt[i], output[i]

    serving_lengths.RequestLengths.draw = draw
    errors = {r["id"]: [] for r in rows}
    for state["seed"] in range(seeds):
        for r in rows:
            t = run_serving(*_case_parts(r)).trace
            errors[r["id"]].append(100.0 * (_value(r, t) / float(r["value"]) - 1.0))
    return "\n".join(f"{k} over {seeds} pair samples: error median {np.median(e):+.1f}%, 10th / 90th percentile "
                     f"{np.percentile(e, 10):+.1f} / {np.percentile(e, 90):+.1f}%" for k, e in errors.items())


def _case_parts(row: dict):
    case = case_from_row(row)
    return case.deployment, case.load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("rows", nargs="+")
    parser.add_argument("--lengths-toml", help="another serving_lengths.toml")
    parser.add_argument("--pairs", help="npz of the dataset's kept (prompt, output) token counts")
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    if args.lengths_toml:
        _use_table(args.lengths_toml)
    table = {r["id"]: r for r in csv.DictReader(open(args.csv, newline=""))}
    rows = [table[k] for k in args.rows]
    if args.pairs:
        print(pair_spread(rows, args.pairs, args.seeds))
        return
    for r in rows:
        print(describe(r))


if __name__ == "__main__":
    main()
