"""SGLang's admission rule ("reserve_output"): room for a request's whole output, estimated.

SGLang admits a waiting request only when its prompt plus its max_new_tokens fit in the free KV
slots less what the running requests are expected still to write: each running request's
remaining max_new_tokens (clipped) x ``new_token_ratio`` (sglang 0.3.0 managers/policy_scheduler.py
PrefillAdder.remove_running_tokens / add_one_req; 0.5.x managers/schedule_policy.py PrefillAdder).
The ratio starts at its initial value when the engine is idle, loses ``decay`` at each decode step
down to its floor, and a retraction replaces it by what the batch left behind has actually needed
(schedule_batch.py ScheduleBatch.retract_decode). A retraction frees the requests with the fewest
tokens generated until every remaining one has room for ``retract_decode_steps`` more tokens.

The functions read the simulation's state (autotune/cost/serving_sim.py ``_State``): per-request
arrays by id, ``running`` ids, ``ratio_base`` and ``ratio_decays``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.spec.serving_engine import ServingEngine

__all__ = ["DP_ATTENTION_CONSERVATIVENESS", "OutputReserve", "output_reserve", "reserve_room", "output_need", "steps_until_admitted",
           "retraction_victims", "ratio_after_retraction", "decayed_ratio"]


@dataclass(frozen=True, kw_only=True)
class OutputReserve:
    """The reserve rule's constants (a ServingEngine's new_token_ratio_* and friends)."""

    init_ratio: float
    min_ratio: float
    decay_per_step: float
    retract_decode_steps: int
    clip_tokens: int
    ignore_eos_full: bool  # running requests reserve all their remaining tokens (the simulated ones run to length)


# --enable-dp-attention multiplies schedule_conservativeness by 0.3 (server_args.py ServerArgs.__post_init__, sglang
# 0.4.0-0.4.10, 0.5.0rc0-0.5.3, 0.5.6, 0.5.7 and 0.5.12 wheels), and the scheduler's initial new_token_ratio is
# default_init_new_token_ratio x schedule_conservativeness, its floor and its decay per step proportional to it
# (managers/scheduler.py Scheduler.__init__, 0.5.1 wheel): every ratio scales by 0.3
DP_ATTENTION_CONSERVATIVENESS = 0.3


def output_reserve(engine: ServingEngine, attention_dp: bool = False) -> OutputReserve | None:
    """The engine's reserve rule, None where it admits on the prompt alone; ``attention_dp``: under SGLang's DP
    attention, its ratios x DP_ATTENTION_CONSERVATIVENESS (each rank admits against a smaller expected output)."""
    if engine.admission != "reserve_output":
        return None
    scale = DP_ATTENTION_CONSERVATIVENESS if attention_dp else 1.0
    return OutputReserve(init_ratio=engine.new_token_ratio_init * scale, min_ratio=engine.new_token_ratio_min * scale,
                         decay_per_step=engine.new_token_ratio_decay * scale, retract_decode_steps=engine.retract_decode_steps,
                         clip_tokens=engine.clip_max_new_tokens, ignore_eos_full=engine.ignore_eos_reserves_all)


def decayed_ratio(rule: OutputReserve, base, decays):
    """The ratio set to ``base`` after ``decays`` decode steps without a retraction (one product,
    so a stretch's prediction and its steps one by one agree to the bit)."""
    return np.maximum(base - decays * rule.decay_per_step, rule.min_ratio)


def _remaining(st: Any, ids: np.ndarray) -> np.ndarray:
    return st.req.output_len[ids] - st.generated[ids]


def _held(st: Any, ids: np.ndarray) -> np.ndarray:
    """KV tokens each request holds now: its prefilled prompt, plus its decoded tokens but the last
    (whose KV the next step writes)."""
    decoding = st.done[ids] >= st.prompt[ids]
    return np.where(decoding, st.done[ids] + st.generated[ids] - st.g0[ids], st.done[ids])


def output_need(st: Any, rule: OutputReserve, i: int) -> int:
    """What request ``i``'s output reserves once its prompt is whole: its max_new_tokens left, clipped."""
    return int(min(max(int(_remaining(st, np.asarray([i]))[0]), 0), rule.clip_tokens))


def reserve_room(st: Any, rule: OutputReserve, capacity: int) -> float:
    """Free KV slots less the running (decoding) requests' expected remaining output
    (PrefillAdder's rem_total_tokens after remove_running_tokens)."""
    ids = st.running
    decoding = ids[st.done[ids] >= st.prompt[ids]]
    ratio = 1.0 if rule.ignore_eos_full else float(decayed_ratio(rule, st.ratio_base, st.ratio_decays))
    left = np.minimum(np.maximum(_remaining(st, decoding), 0), rule.clip_tokens)
    return capacity - float(_held(st, ids).sum()) - float(left.sum()) * ratio


def steps_until_admitted(st: Any, rule: OutputReserve, capacity: int, decodes: np.ndarray, most: int) -> int:
    """The fewest decode steps (``most`` at most) of the batch ``decodes`` after which the first
    waiting request fits: each step every request holds one token more and expects one fewer, and
    the ratio decays. Sum of min(max(left - j, 0), clip) = F(j) - F(j + clip), F(x) = sum max(left - x, 0)."""
    head = st.waiting[0]
    need = int(st.prompt[head] - st.done[head]) + output_need(st, rule, head)
    steps = np.arange(1, most + 1)
    j = steps.astype(float)
    left = np.sort(np.maximum(_remaining(st, decodes), 0).astype(float))
    tail = np.concatenate([np.cumsum(left[::-1])[::-1], [0.0]])  # tail[k]: sum of left[k:]

    def f(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(left, x, side="right")
        return tail[k] - x * (len(left) - k)

    expected = f(j) - f(j + rule.clip_tokens)
    ratio = np.ones_like(j) if rule.ignore_eos_full else decayed_ratio(rule, st.ratio_base, st.ratio_decays + steps)
    room = capacity - float(_held(st, st.running).sum()) - j * len(decodes) - expected * ratio
    fits = np.flatnonzero(need < room)
    return int(j[fits[0]]) if len(fits) else most


def retraction_victims(st: Any, rule: OutputReserve, capacity: int) -> list[int]:
    """Running requests to retract, fewest tokens generated first (then the longest prompt), until
    the rest each have room for retract_decode_steps tokens; one request is always kept."""
    ids = st.running
    order = sorted((int(i) for i in ids), key=lambda i: (int(st.generated[i]), -int(st.req.input_len[i])))
    held = {int(i): int(h) for i, h in zip(ids, _held(st, ids))}
    free, kept, victims = capacity - sum(held.values()), len(order), []
    for i in order:
        if kept == 1 or free >= kept * rule.retract_decode_steps:
            break
        victims.append(i)
        free, kept = free + held[i], kept - 1
    return victims


def ratio_after_retraction(st: Any, rule: OutputReserve) -> float:
    """(tokens the remaining requests generated + retract_decode_steps each) / their max_new_tokens, at most 1."""
    ids = st.running
    total = float(st.req.output_len[ids].sum())
    used = float(st.generated[ids].sum()) + rule.retract_decode_steps * len(ids)
    return min(1.0, used / total) if total > 0 else 1.0
