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
- a prefill pool: every rank taking ``per_rank`` prompt tokens a step, whole prompts of ``prompt_len``.

With DeepEP (SGLang's --enable-deepep-moe) the MoE exchange is DeepEP's, and with
--enable-two-batch-overlap the step runs as two micro-batches that hide each other's exchange
(cost/serving_overlap.py). The KV transfer between pools, the scheduler's host time (the overlap scheduler runs it beside the
GPU) and the queueing of a closed load are not in it: the sources saturate the tested pool.
"""

from __future__ import annotations

from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.cost.serving_overlap import MoeExchange, deepep_exchange_s, overlapped_step_s
from autotune.cost.serving_step import StepModel
from autotune.errors import require

__all__ = ["PHASES", "phase_tokens_per_gpu_s"]

PHASES = ("prefill", "decode")


def phase_tokens_per_gpu_s(dep: ServingDeployment, *, phase: str, per_rank: int, context: int,
                           exchange: MoeExchange | None = None) -> float:
    """Tokens per second per GPU of one instance of ``dep`` running only ``phase`` steps: decode,
    ``per_rank`` requests a rank over ``context`` cached positions each (output tokens/s); prefill,
    ``per_rank`` prompt tokens a rank a step in prompts of ``context`` tokens (input tokens/s);
    ``exchange``: the MoE exchange the deployment runs (None: the step model's all-to-all)."""
    require(phase in PHASES, "phase", f"{phase!r}; choose one of: {', '.join(PHASES)}")
    require(per_rank >= 1 and context >= 1, "phase", f"needs a batch and a length >= 1, got {per_rank}, {context}")
    ranks = dep.tp if dep.attention_dp else 1
    if phase == "decode":
        tokens = per_rank * ranks
        step = replica_step_model(dep, max_tokens=tokens, max_sampled=tokens)

        def seconds(part: float) -> float:  # ``part`` of the batch: its requests
            n = max(1, round(tokens * part))
            return step.gpu_s(decodes=n, context=float(n * context), prefill_tokens=0, pairs=0.0, sampled=n)
    else:
        prompts = max(1, per_rank // context) * ranks  # whole prompts a rank, all ranks
        tokens = prompts * context
        step = replica_step_model(dep, max_tokens=tokens, max_sampled=prompts)

        def seconds(part: float) -> float:  # ``part`` of the prompt tokens, whole prompts where they split so
            n = max(1, round(tokens * part))
            pairs = n * (context + 1) / 2.0  # causal query-key pairs of whole prompts
            return step.gpu_s(decodes=0, context=0.0, prefill_tokens=n, pairs=pairs, sampled=max(1, round(prompts * part)))
    return tokens / _step_s(dep, step, seconds, tokens, exchange) / dep.tp


def _step_s(dep: ServingDeployment, step: StepModel, seconds, tokens: int, exchange: MoeExchange | None) -> float:
    """A step of ``tokens`` with the deployment's MoE exchange: the step model's own without DeepEP;
    else its compute plus DeepEP's exchange, serial, or two micro-batches of half the tokens overlapped."""
    if exchange is None or step.exchange_s is None or dep.ep == 1:
        return seconds(1.0)
    moe = dep.model.num_moe_layers

    def parts(part: float) -> tuple[float, float]:  # (compute, DeepEP exchange) of ``part`` of the batch
        n = max(1, round(tokens * part))
        ranks = dep.tp if dep.attention_dp else 1
        deepep = moe * deepep_exchange_s(dep.model, dep.cluster, ep=dep.ep, tokens_per_rank=n / ranks, mode=exchange.mode)
        return seconds(part) - float(step.exchange_s[n]), deepep

    if not exchange.two_batch_overlap:
        return sum(parts(1.0))
    compute, deepep = parts(0.5)
    return overlapped_step_s(compute_half_s=compute, exchange_half_s=deepep, moe_layers=moe, mode=exchange.mode)
