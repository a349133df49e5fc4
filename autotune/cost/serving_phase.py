"""One phase of a prefill-decode disaggregated deployment, priced on its own.

A disaggregated deployment runs prompts on prefill instances and decodes on separate decode instances
(SGLang's --disaggregation-mode prefill / decode); its sources report each pool's throughput with the
other pool given unlimited resources (LMSYS, "Deploying DeepSeek with PD Disaggregation and
Large-scale Expert Parallelism on 96 H100 GPUs", 2025-05-05: "we independently evaluated the prefill
(P) and decode (D) phases, assuming unlimited resources for the non-tested phase"). Such a pool runs
one kind of step back to back at the batch the source states, so its throughput is that step's tokens
over its time, from the same step costs the scheduler simulation uses (serving_step.StepModel):

- a decode pool: every rank decoding ``per_rank`` requests (DP attention: each GPU its own; else the
  instance's batch) over ``context`` cached positions each;
- a prefill pool: every rank taking ``per_rank`` prompt tokens a step, whole prompts of ``context`` tokens.

The KV transfer between pools, the scheduler's host time (the overlap scheduler runs it beside the
GPU) and the queueing of a closed load are not in it: the sources saturate the tested pool.
"""

from __future__ import annotations

from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.errors import require

__all__ = ["PHASES", "phase_tokens_per_gpu_s"]

PHASES = ("prefill", "decode")


def phase_tokens_per_gpu_s(dep: ServingDeployment, *, phase: str, per_rank: int, context: int) -> float:
    """Tokens per second per GPU of one instance of ``dep`` running only ``phase`` steps: decode,
    ``per_rank`` requests a rank over ``context`` cached positions each (output tokens/s); prefill,
    ``per_rank`` prompt tokens a rank a step in prompts of ``context`` tokens (input tokens/s)."""
    require(phase in PHASES, "phase", f"{phase!r}; choose one of: {', '.join(PHASES)}")
    require(per_rank >= 1, "per_rank", f"a rank's batch must be >= 1, got {per_rank}")
    require(context >= 1, "context", f"must be >= 1 tokens, got {context}")
    ranks = dep.tp if dep.attention_dp else 1
    tokens = per_rank * ranks
    if phase == "decode":
        step = replica_step_model(dep, max_tokens=tokens, max_sampled=tokens)
        seconds = step.gpu_s(decodes=tokens, context=float(tokens * context), prefill_tokens=0, pairs=0.0,
                             sampled=tokens)
    else:
        prompts = max(1, per_rank // context) * ranks  # whole prompts a rank, all ranks
        tokens = prompts * context
        step = replica_step_model(dep, max_tokens=tokens, max_sampled=prompts)
        pairs = prompts * context * (context + 1) / 2.0  # causal query-key pairs of whole prompts
        seconds = step.gpu_s(decodes=0, context=0.0, prefill_tokens=tokens, pairs=pairs, sampled=prompts)
    return tokens / seconds / dep.tp
