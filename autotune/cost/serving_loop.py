"""vLLM V1's API server: request intake and token streaming on one event loop.

Since V1 the engine core runs in its own process; the API server process takes requests in and streams
tokens out on one asyncio loop. Intake is the OpenAI handler's work for a request (the JSON body into a
ChatCompletionRequest, the chat template, tokenization, AsyncLLM's Processor and OutputProcessor set-up,
the EngineCoreRequest encoded for the engine core); streaming is AsyncLLM's ``output_handler`` task, which
for every engine step's outputs runs ``OutputProcessor.process_outputs`` (incremental detokenization, the
per-request output queues) and lets each request's generator write its SSE chunk (vllm/v1/engine/async_llm.py
``_run_output_handler``, the 0.11.0 wheel and the 0.33.0 one alike: one ``asyncio.create_task`` on the
server's loop). So the loop is one server with two kinds of work, taken first come first served:

* a request's intake (``intake_s``) when the client sends it; the engine core receives the request only
  once it is done. Each handler runs until its first suspension (the tokenizer's executor in the 0.11.0
  wheel's serving_engine.py ``_preprocess_chat``) and asyncio runs every callback ready at an iteration's
  start before the next (CPython asyncio base_events.py ``_run_once``), so the requests of a burst all
  take that first part (``intake_before_send`` of their intake) before any is sent, then each its rest;
* an engine step's streaming (``stream_s_per_seq`` x the step's streams) when the step's outputs reach
  it; a request's chunk leaves, on average, half-way through its step's streaming.

A token's time on the client's clock is when the loop emits it: behind any intake and streaming queued
before it. The engine core keeps stepping meanwhile: its outputs wait in the ZMQ sockets, which have no
high-water mark (vllm/utils/__init__.py ``make_zmq_socket`` sets SNDHWM and RCVHWM to 0 in the 0.11.0
wheel), so the engine's own step cadence does not change; only the client's stamps do.

The loop's intake for request i ends at a time that depends on the streaming before it, which depends on
when the engine ran the requests before i: :func:`simulate_shared_loop` plays the engine with the intake
ends of the previous pass (damped) as its arrivals, streaming played exactly in time order inside each pass
(``LoopClock``), until the arrivals settle. Under a closed loop (fixed concurrency) a request's intake
is its own ``intake_s`` on the TTFT clock (the loop is rarely busy at a few streams), as the Triton
front end's encode (serving_frontend.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from autotune.cost.serving_run import Requests, Schedule, Trace
from autotune.errors import require

__all__ = ["SharedLoop", "LoopClock", "shared_loop_of", "simulate_shared_loop", "LOOP_PASSES", "LOOP_SETTLED_S", "LOOP_DAMPING"]

# passes of the engine over the loop's intake ends, each moving the arrivals half-way to the last pass's
# intake ends (undamped, a loaded run's arrivals swing by a step's streaming from pass to pass: Llama 3 8B,
# one H100, 80 requests/s, mean TTFT 81-94 ms over 12 passes; damped it settles at 84-85 ms); they stop once
# the arrivals moved by under LOOP_SETTLED_S on average (a millisecond: below the engine's step)
LOOP_PASSES = 12
LOOP_SETTLED_S = 1e-3
LOOP_DAMPING = 0.5


@dataclass(frozen=True, kw_only=True)
class SharedLoop:
    """The API server loop's seconds of work: a request's intake, and one stream's share of a step."""

    intake_s: float
    intake_before_send: float  # the share of an intake before its first suspension (it yields the loop there)
    stream_s_per_seq: float

    def __post_init__(self) -> None:
        require(self.intake_s >= 0 and self.stream_s_per_seq >= 0, "frontend", "loop seconds must be >= 0")
        require(0.0 <= self.intake_before_send <= 1.0, "frontend", "the intake's share before it yields is 0..1")


def shared_loop_of(engine) -> SharedLoop | None:
    """The engine preset's shared loop (a ServingEngine with an intake cost), None where it has none."""
    if not engine.frontend_intake_s:
        return None
    return SharedLoop(intake_s=engine.frontend_intake_s, intake_before_send=engine.frontend_intake_before_send,
                      stream_s_per_seq=engine.frontend_s_per_seq)


@dataclass(frozen=True, kw_only=True, eq=False)
class LoopClock:
    """One pass's loop, played in time order: the intakes (sent at ``sent_s``, sorted), and each engine
    step's streaming as the simulator reports it (:meth:`emit`, called with ever later step ends)."""

    loop: SharedLoop
    sent_s: np.ndarray
    state: dict = field(default_factory=lambda: {"free_at": -np.inf, "next": 0})
    intake_end_s: list = field(default_factory=list)

    def _take_intakes(self, until_s: float) -> None:
        """Run the intakes sent up to ``until_s``, first come first served, in iterations: every request
        sent by the time the loop starts an iteration is taken in it, the part of each intake before its
        first suspension for the whole batch, then each request's rest in order, which sends it."""
        st, sent = self.state, self.sent_s
        while st["next"] < len(sent) and sent[st["next"]] <= until_s:
            start = max(st["free_at"], float(sent[st["next"]]))
            last = max(st["next"] + 1, int(np.searchsorted(sent, min(start, until_s), "right")))
            batch = last - st["next"]
            first = self.loop.intake_s * self.loop.intake_before_send
            rest = self.loop.intake_s - first
            self.intake_end_s.extend(start + batch * first + rest * np.arange(1, batch + 1))
            st["free_at"] = start + batch * self.loop.intake_s
            st["next"] = last

    def emit(self, ends_s: np.ndarray, streams: float) -> np.ndarray:
        """When the loop emits the tokens of steps whose outputs reach it at ``ends_s`` (sorted, each
        step with ``streams`` streams): after the loop's earlier work, half-way through the step's own."""
        work = self.loop.stream_s_per_seq * streams
        ends_s = np.atleast_1d(np.asarray(ends_s, dtype=float))
        out = np.empty(len(ends_s))
        for j, end in enumerate(ends_s):
            self._take_intakes(end)
            start = max(self.state["free_at"], end)
            self.state["free_at"] = start + work
            out[j] = start + 0.5 * work
        return out

    def intake_ends(self) -> np.ndarray:
        """Every request's intake end, the ones after the last step included."""
        self._take_intakes(np.inf)
        return np.asarray(self.intake_end_s)


def simulate_shared_loop(sent: Requests, sched: Schedule, step, loop: SharedLoop, simulate) -> Trace:
    """The engine's run behind the shared loop, on the client's clock (see the module's doc). ``sched``
    carries no frontend stage of its own (``frontend_s_per_seq`` 0); ``simulate`` is serving_sim's."""
    require(sched.frontend_s_per_seq == 0.0, "frontend", "the shared loop replaces the frontend stage")
    if sent.concurrency:
        clock = LoopClock(loop=loop, sent_s=np.zeros(0))
        trace = simulate(sent, replace(sched, loop=clock), step)
        return replace(trace, arrival_s=trace.arrival_s - loop.intake_s)
    sent_s = sent.arrival_s.astype(float)
    arrival = LoopClock(loop=loop, sent_s=sent_s).intake_ends()  # the intakes with no streaming in the way
    for _ in range(LOOP_PASSES):
        clock = LoopClock(loop=loop, sent_s=sent_s)
        trace = simulate(replace(sent, arrival_s=arrival), replace(sched, loop=clock), step)
        ends = clock.intake_ends()
        if float(np.mean(np.abs(ends - arrival))) <= LOOP_SETTLED_S:
            break
        # the next pass's arrivals, half-way to this pass's intake ends (kept in order, as FIFO ends are)
        arrival = np.maximum.accumulate(arrival + LOOP_DAMPING * (ends - arrival))
    return replace(trace, arrival_s=sent_s)
