"""Activation bytes of one pipeline stage at its peak: what each micro-batch in flight saves, the
working bytes of one layer's backward (plus ZeRO-3's gathered layers), and the gradients then held."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.cost import stage as st
from autotune.cost.recompute_modules import modules_dropped_bytes
from autotune.cost.stream_memory import stream_activation_bytes

if TYPE_CHECKING:
    from autotune.cost.compute import BlockTimes
    from autotune.cost.stage import StageContext
    from autotune.plan.plan import StagePlan


def activation_bytes(ctx: StageContext, stage: StagePlan, blocks: dict[str, BlockTimes], n) -> tuple:
    """(bytes saved per micro-batch in flight, temporary working bytes)."""
    saved, temporary = saved_and_working_bytes(ctx, stage, blocks, n)
    return saved, zero3_buffers(stage, blocks["layer"], ctx, temporary)


def saved_and_working_bytes(ctx: StageContext, stage: StagePlan, blocks: dict[str, BlockTimes], n) -> tuple:
    """activation_bytes without ZeRO-3's gathered-layer buffers (the part no sharding choice changes)."""
    layer = blocks["layer"]
    full_layer = st._scalar(layer.saved_bytes)
    if ctx.tables.op_stream:  # what the runtime's captured step held (cost/stream_memory.py)
        dropped = (st._scalar(layer.selective_saved_bytes) if stage.recompute == "selective" else 0.0) \
            + st._scalar(modules_dropped_bytes(ctx, stage, ctx.tables.layer))
        return stream_activation_bytes(ctx, stage, blocks, n, full_layer, dropped)
    if stage.recompute == "full":  # only each layer's input is kept (Korthikanti sec. 4.3)
        m = ctx.tables.model
        per_layer = (ctx.micro_batch * ctx.tables.seq_len / stage.cp * m.hidden_size * ctx.tables.act_bytes
                     / (stage.tp if stage.sequence_parallel else 1))
    elif stage.recompute == "selective_op":  # about half: half the matmul outputs, attention outputs, inputs
        m = ctx.tables.model
        per_layer = 0.5 * (full_layer + ctx.micro_batch * ctx.tables.seq_len / stage.cp * m.hidden_size
                           * ctx.tables.act_bytes / (stage.tp if stage.sequence_parallel else 1))
    else:  # none or selective, less the recomputed modules' activations (cost/recompute_modules.py)
        per_layer = (full_layer - (st._scalar(layer.selective_saved_bytes) if stage.recompute == "selective" else 0.0)
                     - st._scalar(modules_dropped_bytes(ctx, stage, ctx.tables.layer)))
    saved = n * per_layer + sum(st._scalar(blocks[k].saved_bytes) for k in ("embedding", "head") if k in blocks)
    temporary = full_layer  # backward of one layer: its activations and their gradients in flight
    if "head" in blocks:
        m = ctx.tables.model
        logits = ctx.micro_batch * ctx.tables.seq_len / stage.cp * m.vocab_size / stage.tp
        temporary = np.maximum(temporary, logits * (ctx.tables.act_bytes + 4.0))
    return saved, temporary


def gradients_at_peak(ctx: StageContext, stage: StagePlan, grads, activations):
    """Gradient bytes at the step's peak. A runtime that frees gradients after each step
    (Runtime.grads_freed_each_step) and runs one micro-batch without a data-parallel wrapper
    allocates them in backward as the activations are freed: the peak is the larger of all
    activations (no gradients yet) and all gradients, so only gradients beyond the activations count."""
    if not ctx.runtime.grads_freed_each_step or stage.dp > 1:
        return grads
    return np.where(np.asarray(ctx.num_microbatches) == 1, np.maximum(grads - activations, 0.0), grads)


def zero3_buffers(stage: StagePlan, layer: BlockTimes, ctx: StageContext, temporary):
    if stage.zero >= 3:
        temporary = temporary + 2 * st._scalar(layer.params_per_gpu) * ctx.tables.act_bytes  # current + prefetched layer
    return temporary
