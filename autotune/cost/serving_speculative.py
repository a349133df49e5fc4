"""Speculative decoding with a model's own multi-token-prediction (MTP) layer, as a decode step's cost.

A speculative decode step (TensorRT-LLM's MTP, NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/
blog2_DeepSeek_R1_MTP_Implementation_and_Optimization.md @000a01de, 'MTP for inference'): the target
model verifies each sequence's new token and its ``k`` draft tokens in one forward (1 + k query tokens a
sequence, a causal mask over them; the cache is read once), then the MTP module runs ``k`` times to draft
the next step's tokens ('MTP Eagle', the default for DeepSeek-V3/R1: the checkpoint's one MTP module
called k times, each on one token a sequence, with its own KV cache). The step emits the accepted
prefix plus the target's own next token: on average the *acceptance length* A, 1 <= A <= 1 + k (the
blog's Figure 1; TensorRT-LLM's tech blog 1 tabulates it as 'Acceptance Rate', 1.00 without MTP).

The simulator emits one token a request per step, so a speculative step is priced per emitted token:
its decode share divided by A (its prompt share, once). The cache is read once for the 1 + k tokens, but
MLA's absorbed decode scores every cached position for each of them (cost/serving_eval.py
verification_s_per_position): where its heads' FLOPs bind, the position costs 1 + k times. One MTP module costs one average layer of the
target on the step's requests plus the (shared) output head: DeepSeek-V3's MTP module is one transformer
block like the main model's, with the main model's embedding and head (arXiv 2412.19437 sec. 2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from autotune.cost.serving_step import StepModel
from autotune.errors import require

__all__ = ["Speculation", "SpeculativeStepModel", "speculative_step", "geometric_acceptance_length",
           "MTP_ACCEPTANCE_LENGTH", "default_acceptance_length", "speculative_tokens"]

# Where a row states no acceptance: DeepSeek-R1's MTP as TensorRT-LLM runs it (MTP Eagle, one module k
# times) on B200 at batch 1, 1K/2K real data, acceptance length by k (tech blog 1, docs/source/blogs/
# tech_blog/blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md
# @01c4ece9, table 'Autoregressive MTP Layers'). k = 1 agrees with DeepSeek-V3's own report (85-90% of
# second tokens accepted, arXiv 2412.19437 sec. 5.4.3: 1.85-1.90); deeper drafts are accepted less often
# than independent 85% draws would give (2.82 at k = 3 against 3.19), as one module predicts further ahead.
MTP_ACCEPTANCE_LENGTH = {1: 1.92, 2: 2.58, 3: 2.82, 4: 2.99, 5: 3.01}


def default_acceptance_length(draft_tokens: int) -> float:
    """The measured acceptance length for ``draft_tokens`` MTP drafts; past the table its last (the
    table has saturated: 2.99 at k = 4, 3.01 at k = 5)."""
    return MTP_ACCEPTANCE_LENGTH[min(draft_tokens, max(MTP_ACCEPTANCE_LENGTH))]


def geometric_acceptance_length(draft_tokens: int, acceptance: float) -> float:
    """Mean tokens a step emits when each draft is accepted with probability ``acceptance``,
    independently, until the first rejection, plus the target's own token: (1 - a^(k+1)) / (1 - a)
    (Leviathan, Kalman, Matias 2023, 'Fast Inference from Transformers via Speculative Decoding',
    arXiv 2211.17192, eq. 1)."""
    require(0.0 <= acceptance < 1.0, "acceptance", f"a per-draft probability in [0, 1), got {acceptance!r}")
    return (1.0 - acceptance ** (draft_tokens + 1)) / (1.0 - acceptance)


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """``draft_tokens`` (k) drafted a step by the model's MTP module; ``acceptance_length``: tokens
    emitted per step on average, 1..1 + k."""

    method: str
    draft_tokens: int
    acceptance_length: float

    def __post_init__(self) -> None:
        require(self.method == "mtp", "speculative_config", f"decoding_type MTP is modelled, not {self.method!r}")
        require(isinstance(self.draft_tokens, int) and 1 <= self.draft_tokens <= 16, "num_nextn_predict_layers",
                f"an integer 1..16, got {self.draft_tokens!r}")
        require(1.0 <= self.acceptance_length <= 1.0 + self.draft_tokens, "acceptance",
                f"mean tokens a step must be 1..{1 + self.draft_tokens} for {self.draft_tokens} drafts, "
                f"got {self.acceptance_length!r}")


@dataclass(frozen=True, kw_only=True, eq=False)
class SpeculativeStepModel(StepModel):
    """``base``'s costs under ``speculation``, per emitted token: the simulator's decode step is one
    token a request, 1 / A of a speculative step (so its per-position slope is base's / A)."""

    base: StepModel
    speculation: Speculation
    # seconds per cached position of one layer when the sequence's 1 + k tokens score it together (None: base's,
    # the position read once): MLA's absorbed decode packs each sequence's query tokens with its heads
    # (verification_s_per_position), so where its heads' FLOPs bind a position costs them 1 + k times
    verify_s_per_position: float | None = None
    draft: StepModel | None = None  # the MTP module's costs where its weights are not base's (a BF16 module): None, base's

    def gpu_s(self, *, decodes: int, context: float, prefill_tokens: int, pairs: float, sampled: int,
              rank_prefill: tuple[int, float] | None = None, prefix_tokens: float = 0.0) -> float:
        base, k, length = self.base, self.speculation.draft_tokens, self.speculation.acceptance_length
        prompt = base.gpu_s(decodes=0, context=0.0, prefill_tokens=prefill_tokens, pairs=pairs,
                            sampled=sampled - decodes, rank_prefill=rank_prefill,
                            prefix_tokens=prefix_tokens) if prefill_tokens else 0.0
        if not decodes:
            return prompt
        # verification: 1 + k tokens a sequence through the target, logits at each of them
        verify = base.gpu_s(decodes=decodes * (1 + k), context=context, prefill_tokens=prefill_tokens, pairs=pairs,
                            sampled=sampled + decodes * k, rank_prefill=rank_prefill, prefix_tokens=prefix_tokens)
        if self.verify_s_per_position is not None:
            verify += base.num_layers * context * (self.verify_s_per_position - base.decode_s_per_position)
        drafting = k * _draft_pass_s(base if self.draft is None else self.draft, decodes, context)
        return prompt + (verify + drafting - prompt) / length


def _draft_pass_s(base: StepModel, decodes: int, context: float) -> float:
    """One MTP module forward on one token a sequence: an average layer of the target's operators,
    one layer's decode attention over the sequences' cached positions, and the output head."""
    linear = float(base.linear_s[decodes])
    own = -(-decodes // base.dp_ranks)
    if base.dp_ranks > 1:
        linear += float(base.rank_linear_s[own])
    linear += base.up_projection_s(own, 0)  # MLA's absorbed BMMs where the engine's are measured (serving_mla_bmm.py)
    attention = base.decode_attention_s(decodes, context)
    return linear / base.num_layers + attention + float(base.head_s[min(decodes, len(base.head_s) - 1)])


def speculative_step(base: StepModel, speculation: Speculation, verify_s_per_position: float | None = None,
                     draft: StepModel | None = None) -> SpeculativeStepModel:
    """``base`` (tabulated for 1 + k times the step's tokens and sampled rows) as a speculative step
    model; its weights gain the MTP module's, one average layer's. ``verify_s_per_position``: a cached
    position's cost to the verification's 1 + k tokens of a sequence, where not base's (one read);
    ``draft``: the model's step costs in the MTP module's own weight format, where it differs (its drafts
    are priced from it, one average layer of it a pass)."""
    cells = {f.name: getattr(base, f.name) for f in fields(StepModel)}
    per_position = base.decode_s_per_position if verify_s_per_position is None else verify_s_per_position
    cells["decode_s_per_position"] = per_position / speculation.acceptance_length
    module = (base if draft is None else draft).weight_bytes_per_gpu / base.num_layers
    cells["weight_bytes_per_gpu"] = base.weight_bytes_per_gpu + module
    return SpeculativeStepModel(**cells, base=base, speculation=speculation, verify_s_per_position=verify_s_per_position,
                                draft=draft)


def speculative_tokens(max_tokens: int, speculation: Speculation | None) -> int:
    """Token rows a step table needs so the verification of ``max_tokens`` decodes fits."""
    return max_tokens if speculation is None else int(np.ceil(max_tokens * (1 + speculation.draft_tokens)))
