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

Below capacity a rate run's latency is the more sensitive to the priced capacity the nearer it runs to it:
with a step of a + b tokens and tokens = rate x length x step in the steady state (Little's law), a step
lasts a / (1 - rho), rho = rate x length x b, so 1% more capacity (b 1% lower) takes rho / (1 - rho) % off
the step's time (``latency_pct_per_capacity_pct``; rho read as the rate over the budget-full capacity).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capacity", "budget_capacity", "saturation_note", "priced_load", "latency_pct_per_capacity_pct"]


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


def _rate_capacity(run) -> Capacity | None:
    """The budget-full capacity of a fixed-rate run's replica; None for another kind of load or a speculative
    deployment (its steps verify drafts)."""
    load = run.load
    if load.kind != "rate" or run.deployment.speculation is not None:
        return None
    return budget_capacity(run.step, run.limits, load.input_len, load.output_len)


def priced_load(run) -> float | None:
    """A fixed-rate run's (serving_eval.ServingRun) requests/s a replica over its priced capacity (rho; 1 or more:
    saturated); None where _rate_capacity has none."""
    cap = _rate_capacity(run)
    return None if cap is None else run.load.rate_per_s / cap.requests_per_s


def latency_pct_per_capacity_pct(load: float | None) -> float | None:
    """How many % a rate run's step time (so its TPOT) falls for 1% more capacity at priced load ``load``:
    rho / (1 - rho) below capacity; None at or above it (the queue grows through the run) or without a load."""
    # step = a / (1 - rho), rho = rate x length x b: d ln(step) / d ln(1 / b) = -rho / (1 - rho)
    return None if load is None or load >= 1.0 else load / (1.0 - load)


def saturation_note(run) -> str:
    """What a fixed-rate run (serving_eval.ServingRun) priced above its replica's capacity reads; "" for a
    run within it, another kind of load, or a speculative deployment (its steps verify drafts)."""
    cap = _rate_capacity(run)
    load = run.load
    if cap is None or load.rate_per_s <= cap.requests_per_s:
        return ""
    return (f"saturated: {load.rate_per_s:.4g} requests/s a replica against a priced capacity of {cap.requests_per_s:.4g} "
            f"(budget-full {1e3 * cap.step_s:.1f} ms steps of {cap.decodes:.0f} decodes and {cap.prompt_tokens:.0f} prompt "
            f"tokens at the mean lengths): the simulated queue grows through the run, so its latencies grow with the run's "
            f"length ({load.num_requests} requests simulated a replica)")
