"""SGLang's DP-attention ranks in lockstep, each with its own scheduler: how much a fixed-concurrency run of one prompt
and output length slows when the ranks fall out of step (a diagnosis beside the replica-level simulator, which keeps
the ranks in step: one prompts-first decision for the replica).

Under --enable-dp-attention every rank schedules its own requests (prompts first: a rank with waiting requests runs
a prompt step, else it decodes its running ones) and the ranks run each forward together (the MoE layers gather all
ranks' tokens). A step in which any rank runs prompts replays no CUDA graph on any rank (managers/scheduler.py
prepare_mlp_sync_batch: can_cuda_graph = min over the ranks of "decode or idle", sglang 0.5.1 wheel), so the ranks
that decode then issue their operators eagerly. A chunk budget is each rank's (server_args.py: chunked_prefill_size
// dp_size under DP attention). Requests reach the ranks round-robin through one intake that takes
``intake_s`` a request (the tokenizer manager's work a request: not measured here, so an input to vary); 0: all at
once, as the simulator has them. The step costs are the row's priced ones (serving_eval.replica_step_model,
Schedule); the host's scheduler time overlapped as the preset says (serving_host.py "all").

usage: python scripts/diag_sglang_dp_lockstep.py CSV ROW_ID [INTAKE_S ...]
e.g.   python scripts/diag_sglang_dp_lockstep.py tests/data/sglang_newer_check.csv sglnew-031 0 0.0005 0.001"""

from __future__ import annotations

import csv
import sys
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import eager_issue_s, replica_limits, run_serving


@dataclass(kw_only=True)
class Rank:
    waiting: deque = field(default_factory=deque)  # (ready time, request id)
    running: list = field(default_factory=list)  # [context tokens, generated] per request


def _rank_plan(rank: Rank, t: float, chunk: int, cap: int, isl: int) -> int:
    """Prompts this rank takes this step (0: it decodes its running requests, if any)."""
    ready = 0
    while ready < len(rank.waiting) and rank.waiting[ready][0] <= t:
        ready += 1
    return min(ready, max(1, chunk // isl), cap - len(rank.running))


def _step_s(step, rs: list, takes: list, isl: int, eager_s: float, host: tuple[float, float]) -> float:
    """Wall seconds of one lockstep step: eager on every rank where any rank takes prompts (its decoding ranks
    included), else every rank replaying the busiest rank's decode graph; the host's scheduling beside it."""
    decoding = [0 if k else len(r.running) for r, k in zip(rs, takes)]
    ctx = [c for r, k in zip(rs, takes) if not k for c, _ in r.running]
    positions = step.window.positions(np.asarray(ctx, dtype=float)) if ctx else 0.0
    prompts = sum(takes)
    if prompts:
        pairs = float(step.window.pairs(0.0, float(isl))) * prompts
        busiest = max(takes)
        gpu = step.gpu_s(decodes=sum(decoding), context=positions, prefill_tokens=prompts * isl, pairs=pairs,
                         sampled=sum(decoding) + prompts, rank_prefill=(busiest * isl, pairs / prompts * busiest))
        busy = max(gpu, eager_s)
    else:
        rows = len(rs) * max(decoding)
        busy = step.gpu_s(decodes=rows, context=positions * rows / max(1, sum(decoding)), prefill_tokens=0,
                          pairs=0.0, sampled=rows)
    return max(busy, host[0] + host[1] * max(len(r.running) + k for r, k in zip(rs, takes)))


def _advance(rs: list, takes: list, isl: int, osl: int) -> int:
    """Each rank's step done: its prompts start decoding, or its decodes gain a token; the requests finished."""
    finished = 0
    for r, k in zip(rs, takes):
        for _ in range(k):
            r.waiting.popleft()
            r.running.append([isl + 1, 1])
        if k:
            continue
        for req in r.running:
            req[0], req[1] = req[0] + 1, req[1] + 1
        finished += sum(1 for req in r.running if req[1] >= osl)
        r.running = [req for req in r.running if req[1] < osl]
    return finished


def run(row: dict, intake_s: float) -> tuple[float, int, int]:
    """(seconds, steps, steps with a prompt on some rank) of the row's run under per-rank scheduling."""
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    step = run_serving(dep, load.__class__(**{**load.__dict__, "num_requests": 1})).step
    ranks, engine = step.dp_ranks, dep.runtime.serving
    isl, osl, n = int(load.input_len), int(load.output_len), load.num_requests
    chunk = engine.chunk_tokens_on(dep.cluster.device.memory_bytes) // ranks
    cap = replica_limits(dep, load).max_num_seqs // ranks
    eager_s, host = eager_issue_s(dep), (engine.step_host_s, engine.step_host_s_per_seq)
    rs = [Rank() for _ in range(ranks)]
    intake = {"free": 0.0, "sent": 0}

    def send(at: float) -> None:  # one intake, then round-robin to the ranks
        intake["free"] = max(intake["free"], at) + intake_s
        rs[intake["sent"] % ranks].waiting.append((intake["free"], intake["sent"]))
        intake["sent"] += 1

    for _ in range(min(load.concurrency, n)):
        send(0.0)
    t, steps, mixed, done = 0.0, 0, 0, 0
    while done < n:
        takes = [_rank_plan(r, t, chunk, cap, isl) for r in rs]
        if not any(takes) and not any(r.running for r in rs):  # all idle: on to the next ready request
            t = min(r.waiting[0][0] for r in rs if r.waiting)
            continue
        t, steps, mixed = t + _step_s(step, rs, takes, isl, eager_s, host), steps + 1, mixed + bool(any(takes))
        finished = _advance(rs, takes, isl, osl)
        done += finished
        for _ in range(min(finished, n - intake["sent"])):
            send(t)
    return t, steps, mixed


def main(argv: list[str]) -> None:
    rows = {r["id"]: r for r in csv.DictReader(open(argv[0], encoding="utf-8"))}
    row = rows[argv[1]]
    measured = float(row["value"])
    for intake in (float(x) for x in (argv[2:] or ["0"])):
        seconds, steps, mixed = run(row, intake)
        case = case_from_row(row)
        tokens = case.load.num_requests * case.load.output_len
        print(f"{argv[1]} intake {intake * 1e3:.2f} ms a request: {seconds:.1f} s, {steps} steps ({mixed} with a prompt "
              f"on some rank), {tokens / seconds:.0f} output tok/s (measured {measured:.0f}, {100 * (tokens / seconds / measured - 1):+.1f}%)")


if __name__ == "__main__":
    main(sys.argv[1:])
