"""Whole prompts under attention DP fill each rank's own token budget (issue 31, trtdep45).

Under attention DP every rank runs its own scheduler over its own requests (TensorRT-LLM's PyExecutor per rank,
py_executor.py _fetch_new_requests handing each rank its share; the replica's budget in EngineLimits is the ranks'
budgets summed). Without chunked prefill a rank's micro-batch scheduler counts one token per decoding request and
a context request's whole prompt against its own max_num_tokens, and stops at the first request that does not fit
(NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp MicroBatchScheduler::operator(),
stored revisions, index ids 48018004401, 653260947: "if (maxNumTokensRuntime && batchNumTokens + reqNumTokens >
maxNumTokensRuntime.value()) break;"). So a step admits whole prompts rank by rank: with 2,048 tokens a rank and
316 decodes on it, one 1,000-token prompt fits where the pooled budget's 16,384 - 2,525 would take 13 over 8
ranks. Prompts go, in arrival order, to the rank with the most budget left (the simulator's even spread of the
decodes; serving_sim prices the busiest rank's prompts likewise); a prompt that fits no rank ends the step's
admissions. With chunked prefill a rank's chunk fills its own budget and the pooled budget stands.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["mixed_budget", "rank_prompt_budget"]


def rank_prompt_budget(prompts: Iterable[int], budget_tokens: int, decodes: int, ranks: int) -> int:
    """The prompt tokens a step takes when each of ``ranks`` ranks holds ``budget_tokens // ranks`` tokens less its
    share of the ``decodes`` (spread evenly), ``prompts`` (waiting prompts' tokens, in order) placed whole on the
    rank with the most left until one fits none; the pooled ``budget_tokens - decodes`` for one rank."""
    if ranks <= 1:
        return budget_tokens - decodes
    per_rank = budget_tokens // ranks
    left = [per_rank - decodes // ranks - (i < decodes % ranks) for i in range(ranks)]
    taken = 0
    for tokens in prompts:
        i = max(range(ranks), key=left.__getitem__)
        if tokens > left[i]:
            break
        left[i] -= tokens
        taken += tokens
    return taken


def mixed_budget(sched, decodes: int, prompts: Iterable[int]) -> int:
    """The prompt tokens a mixed step of ``sched`` (a serving_run.Schedule) may take beside ``decodes``: the pooled
    budget, or, for whole prompts under attention DP, what the ranks' own budgets take of the waiting ``prompts``;
    the pooled one too where nothing fits a rank with nothing decoding (a prompt the engine would refuse, not a stall)."""
    pooled = sched.max_num_batched_tokens - decodes
    if sched.dp_ranks <= 1 or sched.chunked_prefill:
        return pooled
    taken = rank_prompt_budget(prompts, sched.max_num_batched_tokens, decodes, sched.dp_ranks)
    return taken if taken or decodes else pooled
