"""A pipeline-parallel TensorRT-LLM instance as one stream of pipeline rounds, and the client's view of a run.

TensorRT-LLM's batch manager runs ``pp`` micro-batches in flight on a ``tp`` x ``pp`` instance (mNumMicroBatches =
pipeline parallelism) and schedules each from one list of the instance's requests, less the in-flight set of every
micro-batch's requests (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp
forwardAsync / forwardSync, read @b35ac1b64368 (1.2.0rc2) and an earlier revision of the file: every scheduled
request, a context request still chunking included, joins the in-flight set and leaves it when its micro-batch's
tokens come back; a later revision, @00825c4ee813, keeps a chunking context request out of it, which no MLPerf
harness build is known to run). So:

* the micro-batches share one queue: a prompt starts in whichever micro-batch is scheduled next, and takes one
  chunk of at most that micro-batch's ``max_num_tokens`` a round (pooled here: the instance's requests on one
  simulated stream, pp x the budget, sequences and KV room, a prompt's chunk capped at one micro-batch's budget);
* a round is the fuller micro-batch's whole-model step: each stage runs the pp micro-batches one after another and
  a micro-batch's next step waits for its own last stage, so with stage times t_i / pp the round lasts
  max(max_i t_i, sum_i t_i / pp) = max_i t_i. Here the decodes split evenly over the micro-batches and the round's
  prompt tokens fill one micro-batch's budget first (the first one scheduled takes the queue's chunks FCFS).

The stream-per-micro-batch pricing this replaces gave each micro-batch its own Poisson share and let a micro-batch
of decodes step at its own pace beside one with a prompt chunk. The trace returned is every pp-th request of the
pooled run (one micro-batch's share of the requests: the callers scale throughput by pp)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from autotune.cost.serving_frontend import client_trace, engine_requests, frontend_of
from autotune.cost.serving_load import Load, requests_for
from autotune.cost.serving_loop import shared_loop_of, simulate_shared_loop
from autotune.cost.serving_run import Requests, Schedule, Trace
from autotune.cost.serving_sim import simulate
from autotune.cost.serving_step import StepModel

__all__ = ["RoundStep", "client_trace_of", "instance_trace", "pooled_load", "round_schedule"]


@dataclass(frozen=True, kw_only=True, eq=False)
class RoundStep(StepModel):
    """One pipeline round of ``micro_batches`` micro-batches of at most ``micro_tokens`` tokens each, priced as its
    fuller micro-batch's step. ``decode_s_per_position`` is one micro-batch's (the pooled context / pp grows it)."""

    micro_batches: int = 1
    micro_tokens: int = 0

    def gpu_s(self, *, decodes: int, context: float, prefill_tokens: int, pairs: float, sampled: int,
              rank_prefill: tuple[int, float] | None = None, prefix_tokens: float = 0.0) -> float:
        p = self.micro_batches
        d = math.ceil(decodes / p)  # the decodes split evenly over the micro-batches
        # the fuller micro-batch: its decodes and the round's prompt tokens up to its budget (FCFS, first scheduled)
        chunk = min(prefill_tokens, max(0, self.micro_tokens - d)) if prefill_tokens else 0
        share = chunk / prefill_tokens if prefill_tokens else 0.0
        # context stays pooled: decode_s_per_position is already one micro-batch's (1 / pp of the pooled positions)
        return super().gpu_s(decodes=d, context=context, prefill_tokens=chunk, pairs=pairs * share,
                             sampled=min(math.ceil(sampled / p), d + chunk), prefix_tokens=prefix_tokens * share)


def pooled_load(load: Load, pp: int) -> Load:
    """The instance's requests: ``pp`` micro-batch streams' worth on one stream."""
    return replace(load, num_requests=load.num_requests * pp, rate_per_s=load.rate_per_s * pp,
                   concurrency=load.concurrency * pp)


def instance_trace(engine, pp: int, load: Load, sent: Requests | None, schedule: Schedule, step: StepModel) -> Trace:
    """One micro-batch stream's trace: from the pooled rounds where the engine is TensorRT-LLM's at pp > 1 (its
    micro-batches bounded each by the engine's limits: ServingEngine.pp_seqs_per_micro_batch) and no dispatcher sent
    the stream's own requests, else the stream simulated alone."""
    if pp == 1 or sent is not None or not engine.pp_seqs_per_micro_batch:
        return client_trace_of(engine, requests_for(load) if sent is None else sent, schedule, step)
    budget = schedule.max_num_batched_tokens
    step_fields = {f: getattr(step, f) for f in StepModel.__dataclass_fields__}
    step_fields["decode_s_per_position"] = step.decode_s_per_position / pp
    round_step = RoundStep(**step_fields, micro_batches=pp, micro_tokens=budget)
    pooled = client_trace_of(engine, requests_for(pooled_load(load, pp)), round_schedule(schedule, pp), round_step)
    return _one_stream(pooled, pp)


def round_schedule(schedule: Schedule, pp: int) -> Schedule:
    """The pooled rounds' limits: ``pp`` x a micro-batch's sequences, tokens and KV room, a prompt's chunk at most
    one micro-batch's budget, and each micro-batch's decode CUDA graphs (the PyTorch executor captures and pads
    per micro-batch: model_engine.py _maybe_get_cuda_graph takes the scheduled batch's size, @000a01de): a round
    of b decodes replays graphs while b / pp fits one, padded to pp x the size that ceil(b / pp) pads to."""
    budget = schedule.max_num_batched_tokens
    return replace(schedule, max_num_seqs=schedule.max_num_seqs * pp, max_num_batched_tokens=budget * pp,
                   kv_capacity_tokens=schedule.kv_capacity_tokens * pp,
                   prefill_chunk_tokens=min(schedule.prefill_chunk_tokens or budget, budget),
                   decode_graph_max_batch=schedule.decode_graph_max_batch * pp,
                   decode_graph_sizes=tuple(size * pp for size in schedule.decode_graph_sizes))


def _one_stream(trace: Trace, pp: int) -> Trace:
    """Every ``pp``-th request of a pooled run (in arrival order): one micro-batch stream's share."""
    keep = np.arange(0, len(trace.arrival_s), pp)
    return Trace(arrival_s=trace.arrival_s[keep], first_token_s=trace.first_token_s[keep], finish_s=trace.finish_s[keep],
                 output_len=trace.output_len[keep], input_len=trace.input_len[keep], itl_s=trace.itl_s,
                 itl_weight=trace.itl_weight, steps=trace.steps, mean_running=trace.mean_running / pp,
                 prefilled_tokens=trace.prefilled_tokens // pp)


def client_trace_of(engine, sent: Requests, schedule: Schedule, step: StepModel) -> Trace:
    """The engine's run on the client's clock: through vLLM V1's shared API-server loop (serving_loop.py),
    a server's front end (serving_frontend.py), or none (the engine's own clock)."""
    loop, front = shared_loop_of(engine), frontend_of(engine)
    if loop is not None:
        # one API server a DP rank (frontend_per_dp_rank) takes in that rank's share of the requests
        servers = step.dp_ranks if engine.frontend_per_dp_rank else 1
        loop = replace(loop, intake_s=loop.intake_s / servers, stream_s_per_seq=schedule.frontend_s_per_seq)
        return simulate_shared_loop(sent, replace(schedule, frontend_s_per_seq=0.0), step, loop, simulate)
    if front is None:
        return simulate(sent, schedule, step)
    return client_trace(simulate(engine_requests(sent, front), schedule, step), sent, front)
