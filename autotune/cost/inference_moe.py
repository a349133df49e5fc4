"""Inference stage cost of a mixture-of-experts model (prefill or one decode step).

Dense layers as in cost/inference.py; an MoE layer is its non-expert part (attention, router,
permutation, shared experts) plus the routed experts of cost/moe.py, forward only: the grouped
GEMMs of the experts the micro-batch reaches (a decode step reads only those experts' weights,
1 - (1 - k/E)^tokens of them) and the dispatch and combine all-to-all over the EP group.
"""

from __future__ import annotations

import numpy as np

from autotune.cost import inference as inf
from autotune.cost.compute import block_times
from autotune.cost.mesh import group_spans
from autotune.cost.moe import expert_layer_cost, moe_layer_split
from autotune.cost.stage import StageCost, StageTime
from autotune.errors import require
from autotune.plan.plan import StagePlan
from autotune.spec.workload import GEMM_OPERAND_BYTES

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a stage of training or of inference
    from autotune.cost.context import CostContext

__all__ = ["moe_inference_stage_cost"]


def moe_inference_stage_cost(ctx: CostContext, stage: StagePlan, pos, num_layers=None) -> StageCost:
    """inference_stage_cost for a stage of an MoE model."""
    m = ctx.tables.model
    require(m.num_experts % stage.ep == 0, "ep", f"ep={stage.ep} must divide the {m.num_experts} experts")
    require(not inf.offloads(stage) and not stage.cache_group_layers, "stage",
            "offload and cache grouping are not modelled for mixture-of-experts stages")
    require(ctx.workload.dtype not in GEMM_OPERAND_BYTES, "dtype",
            "pre-quantized FP8/FP4 experts are priced by the serving engines (--runtime vllm, sglang, tensorrt-llm), "
            "not by the static inference plan; use bf16 or fp16 here")
    n_total = stage.num_layers if num_layers is None else num_layers
    n_dense, n_moe = moe_layer_split(ctx.tables, stage, num_layers)
    blocks = inf._blocks(ctx, stage, n_total)
    layer = blocks["layer"]
    moe = block_times(ctx.tables.moe_layer, ctx.cluster.device, ctx.workload.dtype, ctx.micro_batch, stage.tp,
                      stage.cp, stage.sequence_parallel)
    ex = expert_layer_cost(ctx, stage, pos.first_gpu)
    others = [b for k, b in blocks.items() if k != "layer"]
    fwd = n_dense * layer.fwd_s + n_moe * (moe.fwd_s + ex.fwd_s) + sum(b.fwd_s for b in others)
    params = (n_dense * layer.params_per_gpu + n_moe * (moe.params_per_gpu + ex.params_per_gpu)
              + sum(b.params_per_gpu for b in others))
    spans = group_spans(stage.mesh_order, stage.tp, stage.cp, stage.dp, ctx.cluster.gpus_per_node, pos.first_gpu)
    tp_share = (1.0 + (1.0 if m.num_shared_experts else 0.0)) / 2.0  # attention's collective, shared experts'
    zero = 0.0 * fwd
    time = StageTime(compute_s=fwd, tp_comm_s=inf._tp_comm_s(ctx, stage, spans["tp"], n_dense + n_moe * tp_share) + zero,
                     cp_comm_s=inf._cp_comm_s(ctx, stage, spans["cp"], layer, n_dense + n_moe) + zero,
                     p2p_s=inf._p2p_s(ctx, stage, pos) + zero, zero3_comm_s=zero, offload_s=zero,
                     dp_comm_s=zero, optimizer_s=zero, ep_comm_s=n_moe * ex.recompute_comm_s + zero)
    memory = inf._memory(ctx, stage, blocks, n_total, params, pos.inflight)
    memory = inf.replace(memory, temporary_bytes=np.maximum(memory.temporary_bytes, ex.buffer_bytes))
    return StageCost(time=inf._plain_fields(time), memory=inf._plain_fields(memory), params_per_gpu=inf._plain(params),
                     fwd_s=inf._plain(fwd), bwd_s=inf._plain(zero))
