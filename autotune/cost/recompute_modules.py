"""Selective recomputation of named modules (Megatron-Core ``--recompute-granularity selective
--recompute-modules ...``; TransformerConfig.recompute_modules, megatron-core transformer_config.py).

A recomputed module runs its forward again in the backward, so its operators' forward time is
added to the backward, and what it would have kept for backward is dropped. Megatron-Core uses
two kinds of checkpoint (same docstring):

* output-discarding (``layernorm``, ``mla_up_proj``, ``moe_act``): the module's output, saved
  by the operator that reads it, is freed and recomputed from the module's saved input; the
  memory dropped is the module's output bytes;
* normal (``mlp``, ``shared_experts``, ``moe``): only the module's input is kept; the memory
  dropped is what the module's operators save, less its first operator's input (the checkpoint
  keeps it). ``core_attn`` is the ``selective`` set (graph/operator.py selective_recompute),
  priced as recompute ``selective`` is and counted once when the stage already has it.

Which operators each name covers (megatron-core transformer_layer.py, moe_layer.py, experts.py,
multi_latent_attention.py): ``layernorm``: the input and pre-MLP norms; ``mla_up_proj``: MLA's
query and key/value up projections; ``mlp``: a dense layer's MLP only (transformer_layer.py sets
recompute_mlp for non-MoE layers); ``shared_experts``: the shared experts; ``moe``: the whole MoE
layer with its token exchange; ``moe_act``: the routed experts' activation (cost/moe.py prices it).
"""

from __future__ import annotations

import numpy as np

from autotune.cost.compute import op_amounts, saved_ops_bytes

__all__ = ["MODULE_OPS", "OUTPUT_DISCARDING", "EARLY_STOP_SKIPPED", "module_mask", "modules_fwd_s",
           "modules_dropped_bytes", "expert_modules", "early_stop_applies", "early_stop_skipped_fwd_s"]

_SHARED = ("shared_up", "shared_gate", "shared_act", "shared_down")
MODULE_OPS = {
    "layernorm": ("attn_norm", "ffn_norm"),
    "mla_up_proj": ("q_up", "kv_up"),
    "mlp": ("ffn_up", "ffn_act", "ffn_down"),
    "shared_experts": _SHARED,
    "moe": ("router", "router_topk", "permute", "unpermute", *_SHARED),
}
OUTPUT_DISCARDING = ("layernorm", "mla_up_proj", "moe_act")
# Operators a full recomputation under early stop does not rerun (TrainingWorkload.recompute_early_stop):
# the down projection saves its input before its kernel runs, the last save of the block, and the
# residual add after it saves nothing. Measured with torch 2.13 here: a checkpointed pre-norm block
# reruns 3 of its 4 linears and not the final add (tests/test_recompute_early_stop.py); reentrant 4.
EARLY_STOP_SKIPPED = ("ffn_down", "ffn_residual")


def _modules(stage) -> tuple:
    modules = stage.recompute_modules
    return tuple(m for m in modules if m != "core_attn" or stage.recompute != "selective")


def module_mask(table, module: str) -> np.ndarray:
    """Which operators of ``table`` the module covers."""
    if module == "core_attn":
        return np.asarray(table.selective, dtype=bool)
    return np.array([name in MODULE_OPS.get(module, ()) for name in table.names], dtype=bool)


def modules_fwd_s(stage, block, table):
    """Forward seconds of the stage's recomputed modules in one layer of ``table`` (0 for a block
    without per-operator times: the routed experts, priced by expert_modules)."""
    total = 0.0
    if getattr(block, "fwd_ops_s", None) is None:
        return total
    for module in _modules(stage):
        total = total + (block.fwd_ops_s * module_mask(table, module)).sum(-1)
    return total


def modules_dropped_bytes(ctx, stage, table):
    """Activation bytes per GPU one layer of ``table`` no longer keeps for backward."""
    modules = _modules(stage)
    if not modules:
        return 0.0
    args = (table, ctx.micro_batch, stage.tp, stage.cp, bool(stage.sequence_parallel))
    amounts, saved = op_amounts(*args), saved_ops_bytes(*args)
    dropped = 0.0
    for module in modules:
        mask = module_mask(table, module)
        if not mask.any():
            continue
        if module == "core_attn":  # what selective recomputation drops (graph/operator.py)
            dropped = dropped + saved_ops_bytes(*args, table.selective_dropped_bytes).sum(-1)
        elif module in OUTPUT_DISCARDING:
            dropped = dropped + (amounts.act_out_bytes * mask).sum(-1)
        else:  # the checkpoint keeps the first operator's input
            first = int(np.argmax(mask))
            kept = amounts.act_in_bytes[..., first] if table.saved_bytes[first] else 0.0
            dropped = dropped + np.maximum(0.0, (saved * mask).sum(-1) - kept)
    return dropped


def expert_modules(stage, ex) -> tuple:
    """(forward seconds again, activation bytes dropped, exchange seconds again) of the routed
    experts of one MoE layer (cost/moe.py's ExpertLayerCost): ``moe_act`` their activation,
    ``moe`` all of them with the dispatch and combine."""
    modules = _modules(stage)
    if "moe" in modules:
        return ex.fwd_s, ex.saved_bytes, ex.recompute_comm_s
    if "moe_act" in modules:
        return ex.act_fwd_s, ex.act_out_bytes, 0.0
    return 0.0, 0.0, 0.0


def early_stop_skipped_fwd_s(block, table):
    """Forward seconds of one layer's operators that a full recomputation with early stop skips
    (0 for tables without them: an MoE layer's non-expert part, whose last operators save)."""
    mask = np.array([name in EARLY_STOP_SKIPPED for name in table.names], dtype=bool)
    return (block.fwd_ops_s * mask).sum(-1) if mask.any() else 0.0


def early_stop_applies(ctx) -> bool:
    """Whether the stage's full recomputation stops early: the runtime's checkpoint does
    (TrainingWorkload.recompute_early_stop) and no dropout after the FFN saves a mask, which makes
    the down projection's output needed again (measured as EARLY_STOP_SKIPPED)."""
    return bool(ctx.runtime.recompute_early_stop) and not ctx.tables.model.dropout
