"""Activation and working memory of a stage priced from a captured operator stream.

graph/opstream.py keeps what the runtime's own step held: each kernel's saved tensors (in the
tables' saved bytes), the layer's input, and the bytes alive at each kernel of a layer's backward
and of the head (final norm, LM head, loss). Here they become the stage's saved bytes per
micro-batch in flight and its largest working set beyond them, as cost/stage.py's
``_activation_bytes`` does from the hand-written graph's counts (Korthikanti et al. 2022).
"""

from __future__ import annotations

import numpy as np

from autotune.graph.opstream import stream_memory

__all__ = ["stream_activation_bytes"]


def _largest(pairs, micro_batch, per_sequence_split) -> np.ndarray:
    """The largest of ``per_sequence x micro_batch / split + fixed`` over the captured kernels."""
    if not pairs:
        return np.zeros_like(np.asarray(micro_batch, dtype=float))
    values = [np.asarray(micro_batch, dtype=float) * a / per_sequence_split + fixed for a, fixed in pairs]
    return np.maximum.reduce(values)


def stream_activation_bytes(ctx, stage, blocks: dict, n, layer_saved, dropped) -> tuple:
    """(bytes saved per micro-batch in flight, temporary working bytes) of a stage whose tables
    come from an operator stream. ``layer_saved``: one layer's saved bytes (the tables', split);
    ``dropped``: what selective recomputation and recomputed modules do not keep of them.

    Autocast caches its weight casts for the whole forward (autograd's saved 16-bit weights are
    those casts), so every layer's casts are alive until the forward ends; the backward keeps them
    only where the layers saved them (no full recomputation)."""
    tables = ctx.tables
    mem = stream_memory(tables.op_stream, tables.model, tables.seq_len)
    b = np.asarray(ctx.micro_batch, dtype=float)
    sp_split = stage.tp if stage.sequence_parallel else 1
    casts = mem.layer_saved_fixed_bytes / stage.tp
    head = "head" in blocks
    all_casts = n * casts + (mem.head_saved_fixed_bytes / stage.tp if head else 0.0)
    if stage.recompute == "full":  # the layer's input only (the residual stream, fp32 under autocast)
        per_layer = b * mem.layer_input_bytes / (stage.cp * sp_split)
    elif stage.recompute == "selective_op":  # about half, as cost/stage.py
        per_layer = 0.5 * (layer_saved + b * mem.layer_input_bytes / (stage.cp * sp_split))
    else:
        per_layer = layer_saved - dropped
    saved = n * per_layer + sum(np.asarray(blocks[k].saved_bytes, dtype=float) for k in ("embedding", "head") if k in blocks)
    kept = stage.recompute != "full"
    if kept:
        saved = saved + all_casts
    split = stage.cp * stage.tp
    backward = np.maximum(_largest(mem.layer_backward_extra, b, split), 0.0)
    if not kept:  # the layer's activations and casts exist again while its backward runs
        backward = backward + layer_saved + casts
    temporary = backward if kept else np.maximum(backward, all_casts)  # the casts until the forward ends
    if head:  # logits, their fp32 copies and gradients beyond what the head keeps for backward
        head_saved = b * mem.head_saved_bytes / split
        forward = _largest(mem.head_live_forward, b, split) - head_saved + (0.0 if kept else all_casts)
        temporary = np.maximum(temporary, np.maximum(forward, _largest(mem.head_live_backward, b, split) - head_saved))
    return saved, temporary
