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

With DeepEP (SGLang's --enable-deepep-moe) the MoE exchange is DeepEP's, and with
--enable-two-batch-overlap the step runs as two micro-batches that hide each other's exchange
(cost/serving_overlap.py). The KV transfer between pools, the scheduler's host time (the overlap scheduler runs it beside the
GPU) and the queueing of a closed load are not in it: the sources saturate the tested pool.
"""

from __future__ import annotations

from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.cost.serving_overlap import LayerParts, MoeExchange, deepep_exchange_s, overlapped_step_s
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
    require(per_rank >= 1, "per_rank", f"a rank's batch must be >= 1, got {per_rank}")
    require(context >= 1, "context", f"must be >= 1 tokens, got {context}")
    ranks = dep.tp if dep.attention_dp else 1
    if phase == "decode":
        tokens = per_rank * ranks
        step = replica_step_model(dep, max_tokens=tokens, max_sampled=tokens)

        def seconds(n: int, attention: bool = True) -> float:  # ``n`` requests decoding
            return step.gpu_s(decodes=n, context=n * step.window.positions([float(context)]) * attention,
                              prefill_tokens=0, pairs=0.0, sampled=n)
    else:
        prompts = max(1, per_rank // context) * ranks  # whole prompts a rank, all ranks
        tokens = prompts * context
        step = replica_step_model(dep, max_tokens=tokens, max_sampled=prompts)

        def seconds(n: int, attention: bool = True) -> float:  # ``n`` prompt tokens of whole prompts
            # causal query-key pairs of the n // context prompts, fewer on windowed layers (serving_window.py)
            pairs = float(step.window.pairs(0.0, float(context))) * n / context * attention
            return step.gpu_s(decodes=0, context=0.0, prefill_tokens=n, pairs=pairs, sampled=max(1, n // context))
    if exchange is None or step.exchange_s is None or dep.ep == 1:
        return tokens / seconds(tokens) / dep.tp
    if not exchange.two_batch_overlap:
        step_s = _parts(dep, step, seconds, tokens, exchange, phase != "decode").serial_s * dep.model.num_moe_layers
    else:  # two micro-batches of half the requests (decode) or prompt tokens (prefill), SGLang's split
        step_s = overlapped_step_s(_parts(dep, step, seconds, tokens // 2, exchange, phase != "decode"), layers=dep.model.num_moe_layers,
                                   phase=phase, mode=exchange.mode)
    return tokens / step_s / dep.tp


def _parts(dep: ServingDeployment, step: StepModel, seconds, tokens: int, exchange: MoeExchange,
           prefill: bool) -> LayerParts:
    """One MoE layer's share of a step of ``tokens``: its compute split as the overlap schedules it (the
    dense layers and the head spread over the MoE layers) and DeepEP's dispatch and combine in place of the
    step model's exchange."""
    moe = dep.model.num_moe_layers
    experts = float(step.linear_s[tokens] - step.exchange_s[tokens])
    without_attention = seconds(tokens, attention=False)
    ranks = dep.tp if dep.attention_dp else 1
    dispatch, combine = deepep_exchange_s(dep.model, dep.cluster, ep=dep.ep, tokens_per_rank=tokens / ranks,
                                          mode=exchange.mode, nvfp4=exchange.nvfp4_dispatch and dep.dtype == "nvfp4")
    # DeepEP replaces the gather and its SUM_LEN all-reduces in prompt steps (StepModel.prefill_exchange_s) as well
    sum_len = float(step.prefill_exchange_s[tokens]) if step.prefill_exchange_s is not None and prefill else 0.0
    return LayerParts(other=(without_attention - float(step.linear_s[tokens]) - sum_len) / moe,
                      attention=(seconds(tokens) - without_attention) / moe, experts=experts / moe,
                      dispatch=dispatch, combine=combine)
