"""Score a plan: stage costs, the pipeline schedule, and the step's tail."""

from __future__ import annotations

import copy
from dataclasses import fields, replace

from autotune.cost.estimate import Estimate, StageEstimate
from autotune.cost.memory import memory_at_risk
from autotune.cost.offload import offloads, tier_overflow
from autotune.cost.pipeline import pipeline_time_s
from autotune.cost.plan_common import check_plan, check_runtime_plan, stage_estimate, stage_positions, uncertainty_pct
from autotune.cost.contract import stage_cost
from autotune.cost.recompute import has_variant
from autotune.cost.runtime_kernels import kernel_runtime, runtime_cluster
from autotune.cost.dense_stage import dense_stage_cost
from autotune.cost.stage import StageContext, StageCost, StagePosition
from autotune.graph.table import ModelTables, runtime_tables
from autotune.plan.plan import Plan, StagePlan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload, is_training

__all__ = ["evaluate_plan", "check_plan", "stage_positions"]


def evaluate_plan(model: ModelSpec, workload: TrainingWorkload, cluster: ClusterSpec, plan: Plan, *,
                  runtime: Runtime) -> Estimate:
    """Predict step time and memory of ``plan`` run by ``runtime`` for a training step, or for an
    inference workload (prefill, decode, serve: autotune/cost/inference_plan.py)."""
    if not is_training(workload):
        from autotune.cost.inference_plan import evaluate_inference_plan  # not loaded by a training search

        return evaluate_inference_plan(model, workload, cluster, plan, runtime=runtime)
    check_plan(model, workload, cluster, plan)
    check_runtime_plan(runtime, workload, plan)
    # CPU workers sharing cores run slower; the runtime's kernels replace the device's fitted ones
    tables = runtime_tables(model, workload, runtime)  # its captured operator stream, or the graph
    cluster = runtime_cluster(cluster.for_gpus(plan.gpus), kernel_runtime(runtime, tables))
    ctx = StageContext(tables=tables, workload=workload, runtime=runtime, cluster=cluster, micro_batch=plan.micro_batch,
                       num_microbatches=plan.num_microbatches, vpp=plan.vpp,
                       overlap_grad_reduce=plan.overlap_grad_reduce and cluster.comm_overlaps_compute,
                       overlap_param_gather=plan.overlap_param_gather and cluster.comm_overlaps_compute,
                       overlap_tp_comm=plan.overlap_tp_comm and cluster.comm_overlaps_compute,
                       overlap_tp_backward=plan.overlap_tp_backward,
                       overlap_p2p_comm=plan.overlap_p2p_comm and cluster.comm_overlaps_compute,
                       grad_bucket_bytes=plan.grad_bucket_bytes)
    positions = stage_positions(plan, cluster.gpus_per_node)
    costs = _stage_costs(ctx, plan.stages, positions, cluster.gpus_per_node)
    return assemble_estimate(plan, workload, cluster, costs, positions,
                             model_flops_per_step=workload.global_batch * tables.model_flops_per_sequence(),
                             tables=tables)


# Dense stage costs by context and shape, across plans: a search scores many plans (baselines,
# layouts, GPU counts of one model) whose stages repeat. Each entry holds its context, so the
# ids in its key name the same objects while it lives; bounded, as StageCosts are small.
_STAGE_COSTS: dict = {}
_STAGE_COSTS_KEPT = 1024  # a few plans of a few dozen stages each, many times over


_BY_IDENTITY = ("tables", "workload", "runtime", "cluster")
# a stage's fields in its key, but where its layers start (its layer count is in the key): the first field
_LAYERS_FIRST = next(iter(StagePlan.__dataclass_fields__)) == "layers"


def _context_key(ctx: StageContext) -> tuple:
    """Every field of a StageContext, its large parts by identity."""
    return tuple(id(value) if f.name in _BY_IDENTITY else value
                 for f in fields(ctx) for value in (getattr(ctx, f.name),))


def _stage_costs(ctx: StageContext, stages, positions: list[StagePosition], gpus_per_node: int) -> list[StageCost]:
    """stage_cost of each stage; a dense stage without offload (FP8 and partial recomputation
    included) is priced once per distinct shape: its cost does not depend on where its layers
    start, nor on its first GPU beyond the offset in its node (the mesh groups it spans), and its
    activation memory is the bytes saved per micro-batch times those in flight (cost/stage.py;
    FP8 prices the plain stage in an FP8 context, partial recomputation blends two such costs
    linearly, so both keep that). An MoE stage (cost/moe_stage.py) reads its layers only through
    how many of them are dense and how many MoE (moe_layer_split), so those counts join its key."""
    out = []
    context = _context_key(ctx)
    moe = ctx.tables.moe_layer is not None
    for stage, pos in zip(stages, positions):
        fields = tuple(vars(stage).values())
        key = (context, fields[1:] if _LAYERS_FIRST else fields, stage.num_layers,
               ctx.tables.layer_counts(*stage.layers) if moe else None, pos.neighbors, pos.p2p_inter_node,
               pos.first_gpu % gpus_per_node)
        found = _STAGE_COSTS.get(key)  # only stages without offload are kept: the key holds the placements
        if found is None and (offloads(stage) or stage.activation_offload_layers):
            out.append(stage_cost(ctx, stage, pos))
            continue
        if found is None:  # one micro-batch in flight: its activation bytes are the bytes saved per micro-batch
            price = stage_cost if has_variant(stage) or moe else dense_stage_cost
            if len(_STAGE_COSTS) >= _STAGE_COSTS_KEPT:
                _STAGE_COSTS.pop(next(iter(_STAGE_COSTS)))  # the oldest
            found = _STAGE_COSTS[key] = (ctx, price(ctx, stage, StagePosition(
                inflight=1.0, neighbors=pos.neighbors, p2p_inter_node=pos.p2p_inter_node, first_gpu=pos.first_gpu)), {})
        one, by_inflight = found[1], found[2]
        if pos.inflight != 1:  # the stages of a pipeline hold few distinct counts: each scaled once
            scaled = by_inflight.get(pos.inflight)
            if scaled is None:
                scaled = by_inflight[pos.inflight] = replace(one, memory=replace(
                    one.memory, activations_bytes=one.memory.activations_bytes * pos.inflight))
            one = scaled
        out.append(one)
    return out


def _stage_estimates(plan: Plan, costs: list[StageCost], positions: list[StagePosition], usable: float) -> list:
    """stage_estimate of every stage; a stage with the cost object and in-flight count of one
    before it (the middle stages of a deep pipeline) copies that one's estimate, only its index,
    layers and GPUs its own (the rest is read from the cost and the count alone; the time and
    memory mappings are read-only, so they are shared)."""
    made: dict[tuple, StageEstimate] = {}
    out = []
    for i, (cost, pos) in enumerate(zip(costs, positions)):
        first = made.get((id(cost), pos.inflight))
        if first is None:
            out.append(made.setdefault((id(cost), pos.inflight), stage_estimate(i, plan, cost, pos, usable)))
            continue
        one = copy.copy(first)
        for name, value in (("index", i), ("layers", plan.stages[i].layers), ("num_gpus", plan.stages[i].num_gpus)):
            object.__setattr__(one, name, value)
        out.append(one)
    return out


def assemble_estimate(plan: Plan, workload: TrainingWorkload, cluster: ClusterSpec, costs: list[StageCost],
                      positions: list[StagePosition], model_flops_per_step: float,
                      tables: ModelTables | None = None) -> Estimate:
    """Combine stage costs with the schedule into an :class:`Estimate`."""
    times = [c.time.microbatch_s for c in costs]
    b = plan.num_microbatches
    pipe_s = pipeline_time_s(times, b, plan.schedule, plan.vpp)
    k = max(range(len(times)), key=times.__getitem__)
    # the step ends with the largest stage's tail: the grad norm is all-reduced over the model-parallel
    # group (TP x PP) before any stage's optimizer steps (Megatron-LM @32f9155 megatron/core/optimizer/
    # __init__.py grad_stats_parallel_group, clip_grads.get_grad_norm_fp32); the stage DP scores the same
    # (autotune.search.inter_op). Stages' staggered backward ends (stage j finishes j backward steps
    # before stage 0) are not credited: an upper bound on the exposed tail.
    j = max(range(len(costs)), key=lambda i: costs[i].time.step_tail_s)
    slow, tail = costs[k].time, costs[j].time
    step_s = pipe_s + tail.step_tail_s
    breakdown = {
        "compute_s": b * slow.compute_s, "tp_cp_comm_s": b * (slow.tp_comm_s + slow.cp_comm_s),
        "pp_comm_s": b * slow.p2p_s, "pipeline_bubble_s": pipe_s - b * times[k],
        "dp_comm_s": b * slow.zero3_comm_s + tail.dp_comm_s, "optimizer_s": tail.optimizer_s,
        "offload_s": b * slow.offload_s, "ep_comm_s": b * slow.ep_comm_s, "host_s": b * slow.host_s,
    }
    usable = cluster.device.usable_memory_bytes
    stages = _stage_estimates(plan, costs, positions, usable)
    peak_stage = max(stages, key=lambda s: s.peak_memory_bytes)
    capacity = cluster.device.memory_bytes
    fits = all(s.fits for s in stages)
    distinct = list({id(c): c for c in costs}.values())  # a pipeline's stages share a few costs, in stage order
    overflow = next((r for r in (tier_overflow(c.memory, cluster) for c in distinct) if r), "")  # host/CXL capacity
    reason = overflow if fits else (
        f"stage {peak_stage.index} needs {peak_stage.peak_memory_bytes / 2**30:.1f} GiB per GPU "
        f"({peak_stage.peak_memory_bytes:.0f} bytes) but {cluster.device.name} has {capacity / 2**30:.1f} GiB")
    comm = breakdown["tp_cp_comm_s"] + breakdown["pp_comm_s"] + breakdown["dp_comm_s"] + breakdown["ep_comm_s"]
    return Estimate(
        fits=fits and not overflow, step_time_s=step_s,
        tokens_per_s=workload.global_batch * workload.seq_len / step_s,
        tflops_per_gpu=model_flops_per_step / step_s / plan.gpus / 1e12,
        mfu=model_flops_per_step / (step_s * plan.gpus * cluster.device.peak(workload.dtype)),
        peak_memory_bytes_per_gpu=peak_stage.peak_memory_bytes, memory_capacity_bytes=capacity,
        breakdown=breakdown, memory_breakdown=dict(peak_stage.memory_bytes),
        uncertainty_pct=uncertainty_pct(cluster, workload.dtype, 1.0 - comm / step_s, comm / step_s, tables),
        model_flops_per_step=model_flops_per_step, stages=tuple(stages), reason=reason,
        memory_at_risk=fits and any(memory_at_risk(c.memory, capacity) for c in distinct),
    )
