"""How a SGLang fixed-concurrency TTFT row forms in the simulation: first wave against the rest, prompt steps, and the
consecutive prompt steps SGLang's overlap loop would delay (docs/serving.md, sgttft46).

A closed-loop client (InferenceX's benchmark_serving.py: 10 x concurrency prompts, all of the first wave sent at once
after the warm-up) averages TTFT over every request; the first wave (the first ``c``) meets an idle engine and one
burst of c prompts (chunked at --chunked-prefill-size), the rest arrive one by one as requests finish and wait for
the scheduler's poll (--scheduler-recv-interval). Printed per row: the simulated mean TTFT, its first wave and the
rest; the prompt steps (how many, prompts and wall time each); how many prompt steps directly follow a host-bound
prompt step (wall at the eager issue bound), the only case where SGLang's overlap loop (managers/scheduler.py
event_loop_overlap: the next batch is launched before the last one's result is processed, an eager prompt step's
launch being its whole host issue; SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP False by default) would hold a prompt
step's first tokens an extra eager issue; and the measured excess over the simulated mean read two ways: spread on
every request, or carried by the first wave alone ((measured - simulated) x requests / c, seconds a first-wave request).
Then a what-if: the prompt step lengthened (a larger eager issue bound, bisected) until the simulated TTFT meets the
measured one, and the TPOT the run would then show beside the measured TPOT (the row's sibling): a longer prompt step
stalls every running decode, so where the what-if TPOT overshoots the measured one the excess TTFT is not time the
engine's step loop spends (the prompt step, the poll wait at --scheduler-recv-interval 1), but time a request spends
outside it (client, HTTP and tokenizer on the way in, detokenizer and stream on the way out) or a first-wave stall.
Where the source states a P99 TTFT (_P99_TTFT_MS), a third line sets it beside the P99 of the two readings of the excess.

usage: python scripts/sglang_fixed_concurrency_waves.py CSV [CSV ...]   (ttft_mean rows of engine sglang at a
fixed concurrency above 1)"""

from __future__ import annotations

import csv
import re
import sys

import numpy as np

import autotune.cost.serving_eval as ev
import autotune.cost.serving_sim as sim
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import eager_issue_s, run_serving

_ISSUE_S = ev.eager_issue_s

# P99 TTFT (ms) where a source gives it: InferenceX issue #870, comment of 2026-03-05 'Concurrency Sweep: DeepSeek R1
# FP8 H200 SGLang (1k/1k)', row 'P99 TTFT (ms)' (the rows of docs/measurements/inferencex_870_h200_sglang.csv)
_P99_TTFT_MS = {"x870-003": 1975.4, "x870-006": 2149.4, "x870-009": 2644.1, "x870-012": 2741.1}
_STEPS: list[tuple[int, int, float, int]] = []  # (steps before, steps after, wall seconds, prompts completed)


def _recording(single_step):
    """serving_sim._single_step, noting each prompt step's place in the step count and its wall time."""
    def step(st, sched, model, chunks, decodes):
        before, began = st.steps, st.t
        finished = single_step(st, sched, model, chunks, decodes)
        _STEPS.append((before, st.steps, st.t - began, len(chunks)))
        return finished
    return step


_TAIL: dict[str, str] = {}


def _tail(row_id: str, ttft_ms: np.ndarray, c: int, excess_ms: float) -> str:
    """Where the source states a P99 TTFT: the P99 the measured mean's excess gives spread on every request, or
    carried by the first wave alone, beside the stated one."""
    if row_id not in _P99_TTFT_MS:
        return ""
    first = ttft_ms.copy()
    first[:c] += excess_ms * len(ttft_ms) / c
    return (f"{'':11s} P99 TTFT: measured {_P99_TTFT_MS[row_id]:.0f} ms; simulated {np.percentile(ttft_ms, 99):.0f}, "
            f"with the excess on every request {np.percentile(ttft_ms + excess_ms, 99):.0f}, "
            f"on the first wave alone {np.percentile(first, 99):.0f}")


def _consecutive_after_host_bound(issue_s: float) -> int:
    """Prompt steps run directly after a prompt step whose wall time is the eager issue bound (host-bound)."""
    n = 0
    for prev, cur in zip(_STEPS, _STEPS[1:]):
        if cur[0] == prev[1] and prev[2] <= issue_s * 1.001:
            n += 1
    return n


def waves(row: dict) -> str:
    case = case_from_row(row)
    c = case.load.concurrency
    _STEPS.clear()
    trace = run_serving(case.deployment, case.load).trace
    ttft = (trace.first_token_s - trace.arrival_s) * 1e3
    issue = eager_issue_s(case.deployment)
    walls = np.array([s[2] for s in _STEPS]) * 1e3
    prompts = np.array([s[3] for s in _STEPS])
    measured = float(row["value"])
    excess = measured - ttft.mean()
    _TAIL[row["id"]] = _tail(row["id"], ttft, c, excess)
    recv = re.search(r"scheduler-recv-interval[ =](\d+)", row["notes"])
    interval = recv.group(1) if recv else "1"
    return (f"{row['id']:11s} {row['gpu']:5s} TP{row['tp']} {row['precision']:5s} {row['engine_version'][:6]:6s} "
            f"c{c:<3d} n {len(ttft):4d} recv {interval:>2s} | measured {measured:7.1f} ms, "
            f"simulated {ttft.mean():6.1f} = first wave {ttft[:c].mean():6.1f} / rest {ttft[c:].mean():6.1f} | "
            f"prompt steps {len(_STEPS)}: {prompts.mean():.1f} prompts, {walls.mean():.0f} ms each; after a host-bound "
            f"one {_consecutive_after_host_bound(issue)} | excess {excess:+6.0f} ms a request, or "
            f"{excess * len(ttft) / c / 1e3:+5.2f} s a first-wave request")


def _ttft_tpot_ms(row: dict, extra_s: float) -> tuple[float, float]:
    """The simulated mean TTFT and TPOT (the client's: (last - first) / (output - 1)) with every eager prompt step
    ``extra_s`` longer."""
    ev.eager_issue_s = lambda dep: _ISSUE_S(dep) + extra_s
    try:
        case = case_from_row(row)
        tr = run_serving(case.deployment, case.load).trace
    finally:
        ev.eager_issue_s = _ISSUE_S
    tpot = (tr.finish_s - tr.first_token_s) / np.maximum(tr.output_len - 1, 1)
    return float((tr.first_token_s - tr.arrival_s).mean() * 1e3), float(tpot.mean() * 1e3)


def whatif(rows: list[dict], row: dict) -> str:
    """The prompt step that would give the measured TTFT (bisected to 1 ms), and the TPOT it would give."""
    keys = ("gpu", "tp", "ep", "precision", "engine_version", "isl", "osl", "concurrency_or_batch")
    sib = {r["metric"]: float(r["value"]) for r in rows if all(r[k] == row[k] for k in keys)}
    target, lo, hi = float(row["value"]), 0.0, 2.0
    ttft0, tpot0 = _ttft_tpot_ms(row, 0.0)
    if ttft0 >= target:
        return f"{'':11s} what-if: none (the simulated TTFT {ttft0:.0f} ms already meets the measured {target:.0f})"
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _ttft_tpot_ms(row, mid)[0] < target else (lo, mid)
    ttft, tpot = _ttft_tpot_ms(row, hi)
    measured = f"{sib['tpot_mean']:.2f}" if "tpot_mean" in sib else "not stated"
    return (f"{'':11s} what-if: prompt step +{hi * 1e3:.0f} ms -> TTFT {ttft:.0f} ms, TPOT {tpot0:.2f} -> {tpot:.2f} ms "
            f"({tpot - tpot0:+.2f}; measured {measured})")


def main() -> None:
    sim._single_step = _recording(sim._single_step)
    for path in sys.argv[1:]:
        rows = list(csv.DictReader(open(path, encoding="utf-8")))
        for row in rows:
            conc = re.fullmatch(r"concurrency (\d+)", row["concurrency_or_batch"].strip())
            if row["engine"].lower() == "sglang" and row["metric"] == "ttft_mean" and conc and int(conc.group(1)) > 1:
                print(waves(row))
                print(whatif(rows, row))
                if _TAIL.get(row["id"]):
                    print(_TAIL[row["id"]])


if __name__ == "__main__":
    main()
