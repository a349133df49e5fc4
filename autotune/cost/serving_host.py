"""The host's share of a serving step: what a Python engine's CPU does around each GPU step, and
how much of it the GPU waits for.

A Python engine (vLLM, SGLang) runs, for every scheduler call, the scheduler and the preparation of
the step's inputs (per-sequence Python lists of token ids, positions, block tables), and after every
step the processing of its output (the sampled ids to the CPU, each sequence's token appended,
incremental detokenization, stop checks, the per-request output objects). Both grow with the
sequences in the step: Vidur's profile of a vLLM-V0-style engine (Sarathi-Serve) on an A100 host
(microsoft/vidur data/profiling/a100/cpu_overheads.csv @0633efae, Llama-2-7B TP 1 and Llama-2-70B
TP 4, decode batches 8-64; a least-squares line over the 16 rows' means) gives

    schedule + prepare_inputs  0.336 ms + 32.8 us a sequence   (per scheduler call)
    process_model_outputs      0.792 ms + 143.4 us a sequence  (per step)

the same for both models and TP degrees: host work, not the GPU's. How much of it the GPU waits for
depends on what the engine overlaps (``host_overlap``):

* ``none``: the loop is synchronous; the step takes the GPU's time plus all of the host's (vLLM V0
  before 0.6, SGLang 0.3's ``forward_step``).
* ``output``: step n's outputs are processed while step n + 1 runs (vLLM 0.6's asynchronous output
  processor, on by default: config.py ``verify_async_output_proc`` 0.6.0): a step takes the longer of
  its GPU time and the previous step's output processing, plus the scheduler call's exposed time.
* ``all``: the scheduler prepares step n + 1 and processes step n's outputs while step n runs
  (SGLang 0.4's overlap scheduler, vLLM's async scheduling): a step takes the longer of the two.

Multi-step scheduling (vLLM ``--num-scheduler-steps``) pays the scheduler call once per ``calls``
steps; output processing stays per step (multi_step_model_runner.py 0.6.0 pythonizes and processes
every step's output, chained to overlap the next step).

The frontend is a third stage in its own process (vLLM V1's API server: AsyncLLM's output handler
detokenizes each request's new tokens and the OpenAI server writes one SSE chunk a request a step,
on one asyncio loop; v1/engine/async_llm.py). It runs beside the engine core and the GPU, so it adds
no time to a step while it keeps up; when its ``frontend_s_per_seq`` x the step's streams outlasts
the engine's step, the stream goes at the frontend's pace (the slowest stage of a pipeline sets its
rate; the engine's queue of outputs grows, or the engine waits for its sockets, either way clients see
tokens at the frontend's rate). One frontend serves the replica's sequences on every DP rank unless
the engine starts one per rank (``frontend_per_dp_rank``). Where the preset also prices the frontend's
intake of requests, the frontend is instead one event loop shared by intake and streaming, beside an
engine that keeps its own cadence (serving_loop.py; ``delivered_at`` asks that loop when it emits a step's
tokens).
"""

from __future__ import annotations

import numpy as np

from autotune.spec.serving_engine import HOST_OVERLAPS

__all__ = ["HOST_OVERLAPS", "delivered_at", "delivery_delay_s", "frontend_streams", "step_wall_s"]


def frontend_streams(sched, seqs: int, dp_ranks: int) -> int:
    """Sequences of a step one frontend process handles: all the replica's ``seqs``, or a DP rank's
    share where the engine starts a frontend per rank."""
    return -(-seqs // dp_ranks) if sched.frontend_per_dp_rank else seqs


def step_wall_s(sched, gpu_s, calls, eager: bool, seqs: float, streams: float = 0.0):
    """Wall seconds of a step (or an array of decode steps) of ``seqs`` sequences whose GPU time is
    ``gpu_s``: the GPU's time, or the host's issue of its operators where that is longer (an eager
    step: the host cannot run ahead of a GPU faster than it), and the host's scheduling
    (``calls``: 1 where the step begins a scheduler call, else 0) and output processing, exposed as
    the engine's ``host_overlap`` leaves them; at least the frontend's time for the step's ``streams``
    (``frontend_streams``), the stage beside them. ``sched``: a serving_run.Schedule."""
    return np.maximum(_engine_wall_s(sched, gpu_s, calls, eager, seqs), sched.frontend_s_per_seq * streams)


def _engine_wall_s(sched, gpu_s, calls, eager: bool, seqs: float):
    """The engine's step: the GPU's time and its own process's host time, as ``host_overlap`` exposes it."""
    busy = np.maximum(gpu_s, sched.eager_issue_s) if eager else gpu_s
    call = calls * (sched.step_host_s + sched.step_host_s_per_seq * seqs)
    out = sched.output_host_s + sched.output_host_s_per_seq * seqs
    if sched.host_overlap == "all":
        return np.maximum(busy * (1.0 + sched.step_host_share), call + out)
    if sched.host_overlap == "output":
        return np.maximum(busy, out) * (1.0 + sched.step_host_share) + call
    return busy * (1.0 + sched.step_host_share) + call + out


def delivery_delay_s(sched, seqs: float, streams: float = 0.0) -> float:
    """Seconds from a step's end to its tokens reaching the client's stream, beyond the step's own
    wall time. Under asynchronous output processing (``output``) step n's outputs are processed only
    once step n + 1 is launched, after that step's scheduler call (vLLM 0.6.0 llm_engine.py step:
    schedule, then execute_model, whose callback processes the previous outputs after the forward is
    enqueued); with multi-step the tokens stream at a call's end, so the next call's scheduling
    always comes first. Under ``all`` the scheduling of step n + 1 already ran during step n and only
    the output processing remains; under ``none`` it is inside the step. The frontend then handles the
    step's ``streams`` one after another: a request's chunk leaves after half of them on average."""
    out = sched.output_host_s + sched.output_host_s_per_seq * seqs
    front = 0.5 * sched.frontend_s_per_seq * streams
    if sched.host_overlap == "output":
        return sched.step_host_s + sched.step_host_s_per_seq * seqs + out + front
    return (out if sched.host_overlap == "all" else 0.0) + front


def delivered_at(sched, ends_s, seqs: float, streams: float = 0.0):
    """When the tokens of steps ending at ``ends_s`` (a float or sorted array) reach the client: after
    ``delivery_delay_s``, then, where the engine streams through a shared API-server loop
    (``sched.loop``, serving_loop.LoopClock), when that loop emits them."""
    at = ends_s + delivery_delay_s(sched, seqs, streams)
    if sched.loop is None:
        return at
    emitted = sched.loop.emit(at, streams)
    return float(emitted[0]) if np.ndim(at) == 0 else emitted
