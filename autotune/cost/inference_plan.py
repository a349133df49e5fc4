"""Score an inference plan: prefill, decode or serve, with TPS, TPOT, TTFT and the KV cache.

Pipeline formulas, forward only, for B micro-batches per replica with stage times t_i (one
micro-batch, autotune/cost/inference.py):

* prefill: ``T = sum(t_i) + (B - 1) * max(t_i)``, GPipe's forward pass (Huang et al. 2019; Alpa's
  stage objective, Zheng et al. 2022 eq. 1, without the backward).
* decode: a round, in which every sequence gets one token, takes ``max(sum(t_i), B * max(t_i))``:
  a micro-batch's token crosses every stage before its next token can start (latency), and the
  slowest stage serves all B micro-batches once per round (throughput), as in pipelined
  generation (FasterTransformer; Pope et al. 2022 sec. 3.3).
* serve: a static batch: the prefill, then ``output_len - 1`` rounds.

Metrics: TTFT is the prefill of the batch (when the last request has its first token); TPOT is
one decode round (the time between two tokens of a sequence); TPS is the tokens produced per
second, over all replicas: prompt tokens for prefill, generated tokens for decode and serve.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.cost.estimate import BREAKDOWN_KEYS, Estimate, InferenceMetrics
from autotune.cost.plan_common import check_plan, stage_estimate, stage_positions, uncertainty_pct
from autotune.cost.contract import inference_stage_cost
from autotune.cost.inference import (InferenceContext, check_inference_stage, inference_context, kv_bytes_per_token_layer,
                                     workload_phases)
from autotune.cost.offload import tier_overflow
from autotune.cost.pipeline import pipeline_time_s
from autotune.cost.stage import StageCost
from autotune.errors import AutotuneError, require
from autotune.plan.plan import Plan
from autotune.cost.runtime_kernels import kernel_runtime, runtime_cluster
from autotune.spec.runtime import Runtime
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.workload import InferenceWorkload

__all__ = ["evaluate_inference_plan", "check_inference_plan", "require_targets", "workload_phases"]


def check_inference_plan(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, plan: Plan) -> None:
    """Reject plans and workloads this model and cluster cannot run, naming the field."""
    require(workload.max_context_len <= model.max_seq_len, "prompt_len",
            f"{workload.prompt_len} prompt tokens + {workload.decode_steps} decode steps = "
            f"{workload.max_context_len} positions exceed {model.name}'s maximum sequence length {model.max_seq_len}")
    check_plan(model, workload, cluster, plan)
    require(plan.vpp == 1, "vpp", "inference pipelines run one model chunk per stage; use vpp=1")
    for phase in workload_phases(workload):
        for stage in plan.stages:
            check_inference_stage(stage, phase)


@dataclass(frozen=True, kw_only=True)
class _Phase:
    ctx: InferenceContext
    costs: list[StageCost]
    step_s: float  # prefill: the batch's pass; decode: one round
    repeats: int  # 1, or the decode steps
    breakdown: dict[str, float]

    @property
    def total_s(self) -> float:
        return self.step_s * self.repeats


def _breakdown(costs: list[StageCost], num_microbatches: int, step_s: float, repeats: int) -> dict[str, float]:
    """The slowest stage's parts for all micro-batches, and the rest of the phase as bubble."""
    k = max(range(len(costs)), key=lambda i: costs[i].time.microbatch_s)
    t, scale = costs[k].time, repeats * num_microbatches
    out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
    out.update(compute_s=scale * t.compute_s, tp_cp_comm_s=scale * (t.tp_comm_s + t.cp_comm_s),
               pp_comm_s=scale * t.p2p_s, offload_s=scale * t.offload_s, ep_comm_s=scale * t.ep_comm_s,
               host_s=scale * t.host_s,
               pipeline_bubble_s=repeats * (step_s - num_microbatches * t.microbatch_s))
    return out


def _run_phase(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, plan: Plan,
               positions: list, phase: str, runtime: Runtime) -> _Phase:
    ctx = inference_context(model, workload, cluster, phase, runtime=runtime, micro_batch=plan.micro_batch,
                            num_microbatches=plan.num_microbatches)
    # the runtime's kernel speeds; a captured stream lists its eager kernels itself (kernel_runtime)
    ctx = replace(ctx, cluster=runtime_cluster(cluster, kernel_runtime(runtime, ctx.tables)))
    costs = [inference_stage_cost(ctx, stage, pos) for stage, pos in zip(plan.stages, positions)]
    times = [c.time.microbatch_s for c in costs]
    b = plan.num_microbatches
    if phase == "prefill":
        step_s, repeats = pipeline_time_s(times, b, "gpipe"), 1
    else:
        step_s, repeats = max(sum(times), b * max(times)), workload.decode_steps
    return _Phase(ctx=ctx, costs=costs, step_s=step_s, repeats=repeats,
                  breakdown=_breakdown(costs, b, step_s, repeats))


def _forward_flops_per_sequence(ctx: InferenceContext) -> float:
    """Model FLOPs of one pass of one sequence (the full-attention convention of training MFU)."""
    t = ctx.tables
    blocks = [b for b in (t.embedding, t.head) if b is not None]
    return float(t.layers_model_flops() + sum(b.model_flops.sum() for b in blocks))


def _kv_cache_bytes_per_gpu(model: ModelSpec, workload: InferenceWorkload, plan: Plan) -> float:
    """The largest KV cache one GPU holds, wherever it lives (HBM, host or CXL)."""
    if not model.has_attention:
        return 0.0
    per_seq = model.cached_positions(workload.max_context_len) * kv_bytes_per_token_layer(model, workload.activation_bytes)
    per_replica = plan.micro_batch * plan.num_microbatches
    return max(s.num_layers * per_replica * per_seq / (model.kv_cache_shards(s.tp) * s.cp) for s in plan.stages)


def _metrics(model: ModelSpec, workload: InferenceWorkload, plan: Plan, phases: dict[str, _Phase],
             total_s: float) -> InferenceMetrics:
    tokens = {"prefill": workload.batch * workload.prompt_len, "decode": workload.batch * workload.decode_steps,
              "serve": workload.batch * workload.output_len}[workload.kind]
    ttft_s = phases["prefill"].step_s if "prefill" in phases else None
    tpot_s = phases["decode"].step_s if "decode" in phases else None
    missed = [target for target, reached in ((workload.target_tpot_s, tpot_s), (workload.target_ttft_s, ttft_s))
              if target and (reached or 0.0) > target]
    return InferenceMetrics(
        tokens=tokens, tps=tokens / total_s, time_per_token_s=total_s / tokens,
        kv_cache_bytes_per_gpu=_kv_cache_bytes_per_gpu(model, workload, plan),
        kv_cache_bytes=workload.batch * model.cached_positions(workload.max_context_len) * model.num_layers
        * kv_bytes_per_token_layer(model, workload.activation_bytes),
        decode_steps=workload.decode_steps, meets_targets=not missed, ttft_s=ttft_s, tpot_s=tpot_s)


def _peak_costs(phases: dict[str, _Phase]) -> list[StageCost]:
    """Per stage, the phase whose memory peaks higher (the KV cache is full in both)."""
    lists = [p.costs for p in phases.values()]
    return [max(options, key=lambda c: c.memory.peak_bytes) for options in zip(*lists)]


def evaluate_inference_plan(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, plan: Plan, *,
                            runtime: Runtime) -> Estimate:
    """Predict time, TPS, TPOT, TTFT and memory of ``plan`` for an inference workload.

    ``step_time_s`` is the whole workload (prefill plus every decode step); ``inference``
    holds TPS, TPOT (decode, serve), TTFT (prefill, serve), the KV cache and whether the
    serving targets hold.
    """
    check_inference_plan(model, workload, cluster, plan)
    # as evaluate_plan: CPU workers sharing cores run slower; the runtime's kernels
    base = cluster.for_gpus(plan.gpus)
    cluster = runtime_cluster(base, runtime)
    positions = [replace(p, inflight=float(plan.num_microbatches)) for p in stage_positions(plan, cluster.gpus_per_node)]
    phases = {phase: _run_phase(model, workload, base, plan, positions, phase, runtime) for phase in workload_phases(workload)}
    total_s = sum(p.total_s for p in phases.values())
    breakdown = {key: sum(p.breakdown[key] for p in phases.values()) for key in BREAKDOWN_KEYS}
    costs = _peak_costs(phases)
    usable = cluster.device.usable_memory_bytes
    stages = [stage_estimate(i, plan, c, p, usable) for i, (c, p) in enumerate(zip(costs, positions))]
    peak = max(stages, key=lambda s: s.peak_memory_bytes)
    overflow = next((r for r in (tier_overflow(c.memory, cluster) for c in costs) if r), "")
    reason = overflow
    if not all(s.fits for s in stages):
        reason = (f"stage {peak.index} needs {peak.peak_memory_bytes / 2**30:.1f} GiB per GPU but "
                  f"{cluster.device.name} has {cluster.device.memory_bytes / 2**30:.1f} GiB")
    flops = sum(p.repeats * workload.batch * _forward_flops_per_sequence(p.ctx) for p in phases.values())
    metrics = _metrics(model, workload, plan, phases, total_s)
    comm = breakdown["tp_cp_comm_s"] + breakdown["pp_comm_s"] + breakdown["offload_s"] + breakdown["ep_comm_s"]
    return Estimate(
        fits=not reason, step_time_s=total_s, tokens_per_s=metrics.tps,
        tflops_per_gpu=flops / total_s / plan.gpus / 1e12,
        mfu=flops / (total_s * plan.gpus * cluster.device.peak(workload.dtype)),
        peak_memory_bytes_per_gpu=peak.peak_memory_bytes, memory_capacity_bytes=cluster.device.memory_bytes,
        breakdown=breakdown, memory_breakdown=dict(peak.memory_bytes),
        uncertainty_pct=uncertainty_pct(cluster, workload.dtype, 1.0 - comm / total_s, comm / total_s),
        model_flops_per_step=flops, stages=tuple(stages), reason=reason, inference=metrics)


def require_targets(estimate: Estimate, workload: InferenceWorkload, best: str = "") -> None:
    """Raise a one-line AutotuneError when ``estimate`` misses a serving target; ``best`` may
    say what the best plan found reaches."""
    for name, key, label in (("target_tpot_s", "tpot_s", "per output token"), ("target_ttft_s", "ttft_s", "to the first token")):
        target = getattr(workload, name)
        reached = getattr(estimate.inference, key) if estimate.inference else None
        if target and reached is not None and reached > target:
            raise AutotuneError(name, f"the plan takes {reached * 1e3:.3f} ms {label}, above the target "
                                f"{target * 1e3:.3f} ms" + (f"; {best}" if best else ""))
