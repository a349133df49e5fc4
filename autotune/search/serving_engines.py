"""Serving plans for a serving engine: the deployment of ``gpus`` GPUs that serves a load best.

For an engine runtime (vLLM, SGLang, TensorRT-LLM), a plan is what its launch command sets: the
tensor-parallel degree of each replica, the replicas (data parallelism), for mixtures of experts the
expert-parallel degree and DP attention, and the batch and memory limits the engine derives. The
candidates are few (the divisors of the GPU count within a node, times the MoE options), so each is
simulated under the workload's load (``batch`` requests kept in flight over the whole deployment,
``prompt_len`` / ``output_len`` tokens each: autotune/cost/serving_eval.py) and the fastest that
meets the TPOT and TTFT targets wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.cost.serving_eval import ServingDeployment, ServingRun, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.errors import AutotuneError, require
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload

__all__ = ["EnginePlan", "engine_candidates", "engine_plans", "best_engine_plan", "workload_load"]

# Requests simulated per request kept in flight: enough for the closed loop to turn over several times.
_ROUNDS = 4


@dataclass(frozen=True, kw_only=True, eq=False)
class EnginePlan:
    """A deployment and how it serves the load: system output tokens/s, mean TTFT and TPOT."""

    deployment: ServingDeployment
    run: ServingRun
    output_tokens_per_s: float
    ttft_s: float
    tpot_s: float
    meets_targets: bool

    def to_dict(self) -> dict:
        dep, limits = self.deployment, self.run.limits
        return {"tp": dep.tp, "replicas": dep.replicas, "ep": dep.ep, "attention_dp": dep.attention_dp,
                "weight_dtype": dep.dtype, "max_num_seqs": limits.max_num_seqs,
                "max_num_batched_tokens": limits.max_num_batched_tokens,
                "kv_cache_tokens_per_replica": limits.kv_capacity_tokens,
                "output_tokens_per_s": self.output_tokens_per_s, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "meets_targets": self.meets_targets}


def workload_load(workload: InferenceWorkload, replicas: int) -> Load:
    """One replica's share of a serve workload: ``batch`` requests in flight over the deployment."""
    concurrency = max(1, math.ceil(workload.batch / replicas))
    return Load(kind="concurrency", num_requests=_ROUNDS * concurrency, input_len=workload.prompt_len,
                output_len=max(1, workload.output_len), concurrency=concurrency)


def engine_candidates(model: ModelSpec, gpus: int, cluster: ClusterSpec, runtime: Runtime,
                      dtype: str) -> list[ServingDeployment]:
    """Every deployment the engine can launch on ``gpus``: TP within a node dividing the heads,
    replicas for the rest; experts over TP or EP, with DP attention where the engine runs it."""
    out = []
    for tp in [d for d in range(1, min(gpus, cluster.gpus_per_node) + 1) if gpus % d == 0]:
        if model.has_attention and (model.num_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads)):
            continue
        options = [(1, False)]
        if model.is_moe and tp > 1 and model.num_experts % tp == 0:
            options.append((tp, False))
            if runtime.serving.supports_attention_dp:
                options.append((tp, True))
        for ep, attention_dp in options:
            try:
                out.append(ServingDeployment(model=model, cluster=cluster, runtime=runtime, tp=tp, replicas=gpus // tp,
                                             ep=ep, attention_dp=attention_dp, weight_dtype=dtype))
            except AutotuneError:
                continue
    return out


def engine_plans(model: ModelSpec, gpus: int, cluster: ClusterSpec, runtime: Runtime,
                 workload: InferenceWorkload) -> list[EnginePlan]:
    """Each candidate simulated under the workload (those whose weights leave no KV cache skipped)."""
    require(runtime.serving is not None, "runtime", f"{runtime.name} is not a serving engine")
    require(workload.kind == "serve", "workload", "a serving engine plans --workload serve")
    plans = []
    for dep in engine_candidates(model, gpus, cluster, runtime, workload.dtype):
        try:
            run = run_serving(dep, workload_load(workload, dep.replicas))
        except AutotuneError:
            continue
        ttft, tpot = metric_value(run.trace, "ttft_mean"), metric_value(run.trace, "tpot_mean") if workload.output_len > 1 else 0.0
        meets = ((not workload.target_tpot_s or tpot <= workload.target_tpot_s)
                 and (not workload.target_ttft_s or ttft <= workload.target_ttft_s))
        plans.append(EnginePlan(deployment=dep, run=run, ttft_s=ttft, tpot_s=tpot, meets_targets=meets,
                                output_tokens_per_s=metric_value(run.trace, "output_tokens_per_s", scope="system",
                                                                 replicas=dep.replicas)))
    return plans


def best_engine_plan(plans: list[EnginePlan]) -> EnginePlan | None:
    """The highest throughput among the plans that meet the targets (else among all)."""
    if not plans:
        return None
    return max(plans, key=lambda p: (p.meets_targets, p.output_tokens_per_s))
