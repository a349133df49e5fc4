"""The request rate a replica's GPUs sustain at most, and a note for a simulated rate load above it.

At capacity every step runs the engine's token budget (max_num_batched_tokens), and in the steady state
the step's prompt and output tokens come in the load's mean proportion (each request brings input_len
prompt tokens and takes output_len decode steps), so a budget-full step holds budget x output / (input +
output) decoding requests (fewer where max_num_seqs or the KV cache, at the requests' mean cached length,
holds fewer) and completes decodes / output_len requests. Its cost is the replica's own step model
(StepModel.gpu_s; host time aside, so this capacity bounds the simulated one from above, lengths spread
aside). A fixed-rate load above it queues without bound: its latencies grow with the run's length, so a
simulation of the run's first requests (serving_rows.MAX_RATE_REQUESTS a replica) reads them lower than
the whole run would. An MLPerf LoadGen Server run at such a rate would fail its latency bounds (INVALID).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capacity", "budget_capacity", "saturation_note"]


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """A replica's budget-full steady state: ``requests_per_s`` completed at most, each step of
    ``step_s`` seconds holding ``decodes`` decoding requests and ``prompt_tokens`` prompt tokens."""

    requests_per_s: float
    step_s: float
    decodes: float
    prompt_tokens: float


def budget_capacity(step, limits, input_len: float, output_len: float) -> Capacity:
    """The budget-full steady state of a replica with step model ``step`` (serving_step.StepModel) under
    ``limits`` (serving_limits.EngineLimits), at the load's mean lengths."""
    isl, osl, budget = float(input_len), float(output_len), float(limits.max_num_batched_tokens)
    cached = isl + osl / 2.0  # a decoding request's mean cached positions: its prompt and half its output
    decodes = max(1.0, min(budget * osl / (isl + osl), limits.max_num_seqs, limits.kv_capacity_tokens / cached))
    prompt = max(0.0, min(budget - decodes, decodes * isl / osl))
    # a prompt token's causal pairs, (isl + 1) / 2 on average, whole or chunked (a chunk's queries see the chunks before it)
    seconds = step.gpu_s(decodes=round(decodes), context=decodes * cached, prefill_tokens=round(prompt),
                         pairs=prompt * (isl + 1.0) / 2.0, sampled=round(decodes + prompt / isl))
    return Capacity(requests_per_s=decodes / osl / seconds, step_s=seconds, decodes=decodes, prompt_tokens=prompt)


def saturation_note(run) -> str:
    """What a fixed-rate run (serving_eval.ServingRun) priced above its replica's capacity reads; "" for a
    run within it, another kind of load, or a speculative deployment (its steps verify drafts)."""
    load = run.load
    if load.kind != "rate" or run.deployment.speculation is not None:
        return ""
    cap = budget_capacity(run.step, run.limits, load.input_len, load.output_len)
    if load.rate_per_s <= cap.requests_per_s:
        return ""
    return (f"saturated: {load.rate_per_s:.4g} requests/s a replica against a priced capacity of {cap.requests_per_s:.4g} "
            f"(budget-full {1e3 * cap.step_s:.1f} ms steps of {cap.decodes:.0f} decodes and {cap.prompt_tokens:.0f} prompt "
            f"tokens at the mean lengths): the simulated queue grows through the run, so its latencies grow with the run's "
            f"length ({load.num_requests} requests simulated a replica)")
