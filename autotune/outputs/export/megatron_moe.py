"""Megatron-LM flags for mixture-of-experts layers and latent attention.

Option names and semantics from megatron/training/arguments.py (the commit megatron.py targets;
names checked against tests/data/frameworks/megatron_arguments.tsv):

- ``--moe-layer-freq``: an integer N (layer i is MoE when i % N == 0) or a Python list
  expression, 1 for an MoE layer and 0 for a dense one, e.g. ``([0]*3+[1]*58)``.
- ``--moe-shared-expert-intermediate-size``: the total width of the shared experts
  (number of shared experts x each one's width).
- Routers (megatron/core/transformer/moe/moe_utils.py topk_routing_with_score_function, checked
  in megatron-core 0.16.1): softmax after top-k is Megatron's default, i.e. the top-k
  probabilities renormalised (the spec's ``topk_softmax``); ``--moe-router-pre-softmax`` keeps the
  softmax over all experts unrenormalised (``softmax_topk``); ``--moe-router-score-function
  sigmoid`` always renormalises the top-k sigmoid scores when k > 1 (``sigmoid_topk``), and at
  k = 1 keeps the sigmoid of the one logit, which ``--moe-apply-probs-on-input`` multiplies into the
  expert's input (Llama 4's ``topk_sigmoid``, top-1 only);
  ``--moe-router-topk-scaling-factor`` multiplies the weights in every case. Group-limited
  routing (``--moe-router-num-groups``/``--moe-router-group-topk``) scores a group by the sum of
  its top (k / group_topk) scores, DeepSeek-V3's rule.
- RoPE scaling (megatron/training/arguments.py and argument_utils.py at the commit megatron.py
  targets): linear interpolation ``--rotary-seq-len-interpolation-factor`` (an integer);
  Llama 3.1's scaling ``--use-rope-scaling --rope-scaling-factor`` (Megatron-Core fixes low/high
  frequency factors 1/4 and the original context 8192); YaRN ``--position-embedding-type yarn``
  with ``--rotary-scaling-factor``, ``--yarn-original-max-position-embeddings``,
  ``--yarn-beta-fast/slow``, ``--mscale``, ``--mscale-all-dim``. Latent attention takes
  ``--rope-type`` (its default is yarn) and from the YaRN options only the factor and mscales:
  MLATransformerConfig keeps original_max_position_embeddings 4096 and beta 32/1.
"""

from __future__ import annotations

from autotune.outputs.export.common import ExportContext, refuse
from autotune.spec.model import ModelSpec

__all__ = ["expert_parallel_flags", "moe_model_flags", "attention_detail_flags", "layer_pattern", "rope_flags",
           "position_embedding_type"]

NAME = "Megatron-LM"
Flag = tuple[str, str | None]
_ROUTER = {"topk_softmax": [("--moe-router-score-function", "softmax")],
           "softmax_topk": [("--moe-router-score-function", "softmax"), ("--moe-router-pre-softmax", None)],
           "sigmoid_topk": [("--moe-router-score-function", "sigmoid")],
           "topk_sigmoid": [("--moe-router-score-function", "sigmoid"), ("--moe-apply-probs-on-input", None)]}
_LLAMA3_FIXED = (1.0, 4.0, 8192)  # RotaryEmbedding._apply_scaling's low/high freq factors and original context
_MLA_YARN_FIXED = (4096, 32.0, 1.0)  # MLATransformerConfig original_max_position_embeddings, beta_fast, beta_slow


def layer_pattern(flags: list[int]) -> str:
    """A run-length Python list expression of 0/1 layer flags: ``([0]*3+[1]*58)``."""
    runs: list[tuple[int, int]] = []
    for flag in flags:
        if runs and runs[-1][0] == flag:
            runs[-1] = (flag, runs[-1][1] + 1)
        else:
            runs.append((flag, 1))
    return "(" + "+".join(f"[{flag}]*{count}" for flag, count in runs) + ")"


def expert_parallel_flags(ctx: ExportContext) -> list[Flag]:
    s = ctx.stage
    if not ctx.model.is_moe:
        return []
    return [("--expert-model-parallel-size", str(s.ep)), ("--expert-tensor-parallel-size", str(s.etp))]


def _moe_layer_freq(m: ModelSpec) -> str:
    if m.first_k_dense_layers == 0:
        return str(m.moe_layer_frequency)
    return layer_pattern([int(m.is_moe_layer(i)) for i in range(m.num_layers)])


def moe_model_flags(m: ModelSpec) -> list[Flag]:
    """The MoE layers: experts, top-k, widths, which layers, router, dispatcher and grouped GEMM."""
    if not m.is_moe:
        return []
    flags: list[Flag] = [("--num-experts", str(m.num_experts)), ("--moe-router-topk", str(m.num_experts_per_token)),
                         ("--moe-ffn-hidden-size", str(m.expert_ffn_hidden_size)),
                         ("--moe-layer-freq", _moe_layer_freq(m))]
    if m.num_shared_experts:
        flags.append(("--moe-shared-expert-intermediate-size",
                      str(m.num_shared_experts * m.shared_expert_ffn_hidden_size)))
    flags += _router_flags(m)
    flags += [("--moe-router-load-balancing-type", "aux_loss"), ("--moe-token-dispatcher-type", "alltoall"),
              ("--moe-grouped-gemm", None)]
    return flags


def _router_flags(m: ModelSpec) -> list[Flag]:
    if m.router == "topk_sigmoid" and m.num_experts_per_token > 1:
        raise refuse(NAME, "model.router", f"Megatron-Core renormalises top-{m.num_experts_per_token} sigmoid scores; "
                                           "the model keeps each expert's sigmoid (it matches at top-1 only)")
    if m.num_experts_per_token == 1 and m.router not in ("softmax_topk", "topk_sigmoid"):
        raise refuse(NAME, "model.router", f"with top-1 a renormalised weight is 1, but Megatron-Core needs "
                                           f"--moe-router-pre-softmax at top-1 (softmax) or does not renormalise "
                                           f"(sigmoid); {m.router} at top-1 has no setting")
    linear_bias = m.bias if m.attn_out_bias is None else m.attn_out_bias  # what --disable-bias-linear follows
    if m.router_bias != linear_bias:  # megatron-core 0.16.1 transformer/moe/router.py: a bias iff add_bias_linear
        raise refuse(NAME, "model.router_bias", f"Megatron-Core's router has a bias exactly when the linear layers do; "
                                                f"the model has router bias {m.router_bias}, linear biases {linear_bias}")
    flags = list(_ROUTER[m.router])
    if m.router_scaling_factor != 1.0:
        flags.append(("--moe-router-topk-scaling-factor", repr(float(m.router_scaling_factor))))
    if m.router_groups:
        # a group's score: its best expert (DeepSeek-V2, softmax) or its best two summed (DeepSeek-V3,
        # sigmoid; transformers' DeepseekV3TopkRouter); Megatron-Core sums the top k / group_topk
        per_group = 2 if m.router == "sigmoid_topk" else 1
        if m.num_experts_per_token // m.router_group_topk != per_group:
            raise refuse(NAME, "model.router_groups", f"the model scores a group by its top {per_group} expert(s); "
                                                      "Megatron-Core sums the top "
                                                      f"{m.num_experts_per_token // m.router_group_topk}")
        flags += [("--moe-router-num-groups", str(m.router_groups)), ("--moe-router-group-topk", str(m.router_group_topk))]
    if m.router_expert_bias:
        flags.append(("--moe-router-enable-expert-bias", None))
    return flags


def position_embedding_type(m: ModelSpec) -> str | None:
    """``--position-embedding-type`` for a rotary model (None: not rotary)."""
    if m.position_embedding != "rotary":
        return None
    return "yarn" if m.rope_scaling == "yarn" and not m.is_mla else "rope"


def rope_flags(m: ModelSpec) -> list[Flag]:
    """RoPE scaling for long context (none: nothing, or plain rope for latent attention)."""
    if m.position_embedding != "rotary":
        return []
    kind, factor = m.rope_scaling, m.rope_scaling_factor
    if m.is_mla:
        if kind not in ("none", "yarn"):
            raise refuse(NAME, "model.rope_scaling", f"latent attention takes rope or yarn; {kind} has no setting")
        if kind == "none":
            return [("--rope-type", "rope")]
        if (m.rope_original_max_positions, m.rope_beta_fast, m.rope_beta_slow) != _MLA_YARN_FIXED:
            raise refuse(NAME, "model.rope_scaling", "latent attention's YaRN keeps original context 4096 and "
                                                     "beta_fast/slow 32/1 (no options reach them)")
        return [("--rope-type", "yarn"), ("--rotary-scaling-factor", repr(factor)), ("--mscale", repr(m.rope_mscale)),
                ("--mscale-all-dim", repr(m.rope_mscale_all_dim))]
    if kind == "linear":
        if not float(factor).is_integer():
            raise refuse(NAME, "model.rope_scaling_factor", f"--rotary-seq-len-interpolation-factor takes an "
                                                            f"integer, the model's is {factor}")
        return [("--rotary-seq-len-interpolation-factor", str(int(factor)))]
    if kind == "llama3":
        if (m.rope_low_freq_factor, m.rope_high_freq_factor, m.rope_original_max_positions) != _LLAMA3_FIXED:
            raise refuse(NAME, "model.rope_scaling", "Megatron-Core's Llama 3 scaling fixes low/high frequency "
                                                     "factors 1/4 and the original context 8192")
        return [("--use-rope-scaling", None), ("--rope-scaling-factor", repr(factor))]
    if kind == "yarn":
        # Megatron-Core rounds the correction range by default (megatron-core 0.16.1 yarn_rotary_pos_embedding.py
        # correction_range_round_to_int True); GPT-OSS does not (Megatron-Bridge's gpt_oss bridge sets it False)
        truncate: list[Flag] = [] if m.rope_yarn_truncate else [("--no-yarn-correction-range-round-to-int", None)]
        return [("--rotary-scaling-factor", repr(factor)),
                ("--yarn-original-max-position-embeddings", str(m.rope_original_max_positions)),
                ("--yarn-beta-fast", repr(m.rope_beta_fast)), ("--yarn-beta-slow", repr(m.rope_beta_slow)),
                ("--mscale", repr(m.rope_mscale)), ("--mscale-all-dim", repr(m.rope_mscale_all_dim))] + truncate
    return []


def attention_detail_flags(m: ModelSpec) -> list[Flag]:
    """Latent attention, and the layer shapes Megatron's GPT layer cannot build (the RoPE base,
    head width, biases, QK norm and windows are in megatron.py)."""
    if m.norms_per_layer != 2:
        raise refuse(NAME, "model.norms_per_layer", f"its GPT layer has two pre-norms; {m.norms_per_layer} norms per "
                                                    "layer (a parallel block, or sandwich norms) have no setting")
    if not m.is_mla:
        return rope_flags(m)
    # DeepSeek's multi-head latent attention (q_lora_rank 0: no low-rank query path)
    flags: list[Flag] = [("--multi-latent-attention", None), ("--kv-lora-rank", str(m.kv_lora_rank)),
                         ("--qk-head-dim", str(m.qk_nope_head_dim)), ("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)),
                         ("--v-head-dim", str(m.v_head_dim))]
    if m.q_lora_rank:
        flags.append(("--q-lora-rank", str(m.q_lora_rank)))
    return flags + rope_flags(m)
