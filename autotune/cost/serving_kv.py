"""KV cache blocks in the serving simulation: the tokens a running request holds (whole blocks, less
what a windowed layer frees behind its window), taking blocks as decodes grow, preempting where
they run out, and how many decode steps fit before they do.

The functions read and change the simulation's state (autotune/cost/serving_sim.py ``_State``):
per-request arrays by id, ``running`` and ``waiting`` ids, ``ratio_base`` and ``ratio_decays``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.cost.serving_admission import ratio_after_retraction, retraction_victims
from autotune.cost.serving_run import Schedule

__all__ = ["held_tokens", "kv_tokens", "make_room", "preempt", "steps_in_kv", "whole_blocks"]


def kv_tokens(st: Any, ids: np.ndarray) -> np.ndarray:
    """KV tokens of decoding requests once this step's input token is in: the prompt (with what a
    recomputed request had generated) plus every token generated since."""
    return st.done[ids] + st.generated[ids] - st.g0[ids] + 1


def whole_blocks(tokens, block: int):
    return -(-tokens // block) * block


def held_tokens(sched: Schedule, tokens):
    """KV a decoding request holds (in tokens of every layer) once its ``tokens`` are in: whole blocks on
    every layer, less, on the windowed layers of a hybrid KV cache, the blocks wholly behind the window
    (vLLM's SlidingWindowManager.remove_skipped_blocks frees blocks before (computed - window + 1) //
    block; computed = tokens - 1 at a decode step)."""
    block = sched.kv_block_tokens
    whole = whole_blocks(tokens, block)
    if not sched.kv_windowed_share:
        return whole
    behind = np.maximum(0, (tokens - sched.kv_window_tokens) // block) * block
    return np.ceil(whole - sched.kv_windowed_share * behind).astype(np.int64)


def make_room(st: Any, sched: Schedule, decodes: np.ndarray) -> np.ndarray:
    """Under "grow", take KV blocks for this step's tokens, preempting the latest requests where
    they run out (vLLM's recompute preemption, SGLang's retraction); the decodes that remain."""
    if sched.kv_reservation == "full":
        return decodes
    st.reserved[decodes] = held_tokens(sched, kv_tokens(st, decodes))
    if int(st.reserved[st.running].sum()) <= sched.kv_capacity_tokens:
        return decodes
    if sched.reserve:  # SGLang's retract_decode: its victims, then a new estimate of the ratio
        for victim in retraction_victims(st, sched.reserve, sched.kv_capacity_tokens):
            preempt(st, victim)
        st.ratio_base, st.ratio_decays = ratio_after_retraction(st, sched.reserve), 0
    while int(st.reserved[st.running].sum()) > sched.kv_capacity_tokens and len(st.running) > 1:
        preempt(st, int(st.running[-1]))  # vLLM: the latest admitted first
    return decodes[np.isin(decodes, st.running)]


def preempt(st: Any, victim: int) -> None:
    """Free a running request's KV; it waits first in line to recompute its prompt and what it generated."""
    st.running = st.running[st.running != victim]
    st.prompt[victim] = st.req.input_len[victim] + max(int(st.generated[victim]) - 1, 0)
    st.done[victim], st.reserved[victim] = 0, 0
    st.waiting.appendleft(victim)


def steps_in_kv(st: Any, sched: Schedule, decodes: np.ndarray, most: int) -> int:
    """The most decode steps (1 at least, ``most`` at most) whose KV blocks all fit: after j steps
    each decoding request holds blocks for j more tokens (bisection on the monotone block sum)."""
    others = int(st.reserved[st.running].sum() - st.reserved[decodes].sum())
    held = kv_tokens(st, decodes)

    def fits(j: int) -> bool:
        return others + int(held_tokens(sched, held + j - 1).sum()) <= sched.kv_capacity_tokens

    low, high = 1, most
    if fits(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
