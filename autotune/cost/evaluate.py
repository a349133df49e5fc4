"""Score a plan: stage costs, the pipeline schedule, and the step's tail."""

from __future__ import annotations

from autotune.cost.estimate import Estimate
from autotune.cost.inference_plan import evaluate_inference_plan
from autotune.cost.offload import tier_overflow
from autotune.cost.pipeline import pipeline_time_s
from autotune.cost.plan_common import check_plan, stage_estimate, stage_positions, uncertainty_pct
from autotune.cost.contract import stage_cost
from autotune.cost.stage import StageContext, StageCost, StagePosition
from autotune.graph.table import ModelTables, model_tables
from autotune.plan.plan import Plan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.workload import TrainingWorkload, is_training

__all__ = ["evaluate_plan", "check_plan", "stage_positions"]


def evaluate_plan(model: ModelSpec, workload: TrainingWorkload, cluster: ClusterSpec, plan: Plan) -> Estimate:
    """Predict step time and memory of ``plan`` for a training step, or for an inference
    workload (prefill, decode, serve: autotune/cost/inference_plan.py)."""
    if not is_training(workload):
        return evaluate_inference_plan(model, workload, cluster, plan)
    check_plan(model, workload, cluster, plan)
    cluster = cluster.for_gpus(plan.gpus)  # CPU workers sharing cores run slower
    tables = model_tables(model, workload.seq_len, workload.activation_bytes, workload.attention_impl,
                          workload.qkv_fused)
    ctx = StageContext(tables=tables, workload=workload, cluster=cluster, micro_batch=plan.micro_batch,
                       num_microbatches=plan.num_microbatches, vpp=plan.vpp,
                       overlap_grad_reduce=plan.overlap_grad_reduce and cluster.comm_overlaps_compute,
                       overlap_param_gather=plan.overlap_param_gather and cluster.comm_overlaps_compute,
                       overlap_tp_comm=plan.overlap_tp_comm and cluster.comm_overlaps_compute,
                       overlap_tp_backward=plan.overlap_tp_backward,
                       overlap_p2p_comm=plan.overlap_p2p_comm and cluster.comm_overlaps_compute,
                       grad_bucket_bytes=plan.grad_bucket_bytes)
    positions = stage_positions(plan, cluster.gpus_per_node)
    costs = [stage_cost(ctx, stage, pos) for stage, pos in zip(plan.stages, positions)]
    return assemble_estimate(plan, workload, cluster, costs, positions,
                             model_flops_per_step=workload.global_batch * tables.model_flops_per_sequence(),
                             tables=tables)


def assemble_estimate(plan: Plan, workload: TrainingWorkload, cluster: ClusterSpec, costs: list[StageCost],
                      positions: list[StagePosition], model_flops_per_step: float,
                      tables: ModelTables | None = None) -> Estimate:
    """Combine stage costs with the schedule into an :class:`Estimate`."""
    times = [c.time.microbatch_s for c in costs]
    b = plan.num_microbatches
    pipe_s = pipeline_time_s(times, b, plan.schedule, plan.vpp)
    k = max(range(len(times)), key=times.__getitem__)
    j = max(range(len(costs)), key=lambda i: costs[i].time.step_tail_s)
    slow, tail = costs[k].time, costs[j].time
    step_s = pipe_s + tail.step_tail_s
    breakdown = {
        "compute_s": b * slow.compute_s, "tp_cp_comm_s": b * (slow.tp_comm_s + slow.cp_comm_s),
        "pp_comm_s": b * slow.p2p_s, "pipeline_bubble_s": pipe_s - b * times[k],
        "dp_comm_s": b * slow.zero3_comm_s + tail.dp_comm_s, "optimizer_s": tail.optimizer_s,
        "offload_s": b * slow.offload_s, "ep_comm_s": b * slow.ep_comm_s,
    }
    usable = cluster.device.usable_memory_bytes
    stages = [stage_estimate(i, plan, c, p, usable) for i, (c, p) in enumerate(zip(costs, positions))]
    peak_stage = max(stages, key=lambda s: s.peak_memory_bytes)
    capacity = cluster.device.memory_bytes
    fits = all(s.fits for s in stages)
    overflow = next((r for r in (tier_overflow(c.memory, cluster) for c in costs) if r), "")  # host/CXL capacity
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
    )
