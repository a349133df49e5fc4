"""Megatron-LM flags for mixture-of-experts layers and latent attention.

Option names and semantics from megatron/training/arguments.py (the commit megatron.py targets;
names checked against tests/data/frameworks/megatron_arguments.tsv):

- ``--moe-layer-freq``: an integer N (layer i is MoE when i % N == 0) or a Python list
  expression, 1 for an MoE layer and 0 for a dense one, e.g. ``([0]*3+[1]*58)``.
- ``--moe-shared-expert-intermediate-size``: the total width of the shared experts
  (number of shared experts x each one's width).
- Routers: softmax after top-k is Megatron's default; ``--moe-router-pre-softmax`` puts the
  softmax before top-k; ``--moe-router-score-function sigmoid`` scores with a sigmoid.
"""

from __future__ import annotations

from autotune.outputs.export.common import ExportContext, refuse
from autotune.spec.model import ModelSpec

__all__ = ["expert_parallel_flags", "moe_model_flags", "attention_detail_flags", "layer_pattern"]

NAME = "Megatron-LM"
Flag = tuple[str, str | None]
_ROUTER = {"topk_softmax": [("--moe-router-score-function", "softmax")],
           "softmax_topk": [("--moe-router-score-function", "softmax"), ("--moe-router-pre-softmax", None)],
           "sigmoid_topk": [("--moe-router-score-function", "sigmoid")]}


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
    flags += _ROUTER[m.router]
    flags += [("--moe-router-load-balancing-type", "aux_loss"), ("--moe-token-dispatcher-type", "alltoall"),
              ("--moe-grouped-gemm", None)]
    return flags


def attention_detail_flags(m: ModelSpec) -> list[Flag]:
    """Latent attention, and the layer shapes Megatron's GPT layer cannot build (the RoPE base,
    head width, biases, QK norm and windows are in megatron.py)."""
    if m.norms_per_layer != 2:
        raise refuse(NAME, "model.norms_per_layer", f"its GPT layer has two pre-norms; {m.norms_per_layer} norms per "
                                                    "layer (a parallel block, or sandwich norms) have no setting")
    if not m.is_mla:
        return []
    # DeepSeek's multi-head latent attention (q_lora_rank 0: no low-rank query path)
    flags: list[Flag] = [("--multi-latent-attention", None), ("--kv-lora-rank", str(m.kv_lora_rank)),
                         ("--qk-head-dim", str(m.qk_nope_head_dim)), ("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)),
                         ("--v-head-dim", str(m.v_head_dim))]
    if m.q_lora_rank:
        flags.append(("--q-lora-rank", str(m.q_lora_rank)))
    return flags
