"""Uniform inference plans on a GPU count, enumerated exhaustively, and the best of them.

Degrees (tp, pp, dp), the micro-batch and the KV cache's tier span a small space for inference
(a few hundred plans on 16 GPUs), so plain enumeration is the reference: it says what the best
uniform plan reaches when a serving target cannot be met, and stands in for the searched plan
of the seed experiment until the stage search plans inference.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.plan.plan import Plan
from autotune.spec.runtime import Runtime
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.workload import InferenceWorkload

__all__ = ["Scored", "uniform_inference_plans", "score_plans", "best_plan", "best_plan_note", "plan_label",
           "least_kv_offload"]


@dataclass(frozen=True, kw_only=True)
class Scored:
    plan: Plan
    estimate: Estimate


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def uniform_inference_plans(model: ModelSpec, workload: InferenceWorkload, gpus: int, *, tp: int | None = None,
                            pp: int | None = None, kv_placements: tuple[str, ...] = ("hbm", "host")) -> Iterator[Plan]:
    """Every uniform plan (equal stages, one tp everywhere) on ``gpus``: degrees, micro-batch
    and KV placement; ``tp`` / ``pp`` pin a degree. Plans the builder rejects are skipped."""
    for t in [tp] if tp else _divisors(gpus):
        for p in [pp] if pp else [d for d in _divisors(gpus // t) if d <= model.num_layers]:
            dp = gpus // (t * p)
            if gpus % (t * p) or workload.batch % dp:
                continue
            for micro_batch in _divisors(workload.batch // dp):
                for kv in kv_placements:
                    try:
                        yield uniform_plan(num_layers=model.num_layers, gpus=gpus, tp=t, pp=p, micro_batch=micro_batch,
                                           global_batch=workload.batch, has_embeddings=model.has_embeddings,
                                           kv_cache_in=kv)
                    except AutotuneError:
                        continue


def score_plans(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, plans: Iterator[Plan], *,
                runtime: Runtime, tune_kv_share: bool = True) -> list[Scored]:
    """Estimates of the plans the cost model accepts (invalid ones, e.g. tp not dividing the heads,
    skipped); a plan with its KV cache off HBM keeps only the share that HBM cannot hold there."""
    out = []
    for plan in plans:
        try:
            scored = Scored(plan=plan, estimate=evaluate_plan(model, workload, cluster, plan, runtime=runtime))
        except AutotuneError:
            continue
        if tune_kv_share and plan.stages[0].kv_cache_in != "hbm" and scored.estimate.fits:
            scored = least_kv_offload(model, workload, cluster, scored, runtime)
        out.append(scored)
    return out


def _with_kv_share(plan: Plan, share: float) -> Plan:
    return plan.with_changes(stages=tuple(replace(s, kv_cache_in_share=share) for s in plan.stages))


def least_kv_offload(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, offloaded: Scored,
                     runtime: Runtime) -> Scored:
    """The plan with the smallest share of its KV cache off HBM (in hundredths) that fits.

    A stage's HBM peak is linear in the share, so it is solved from the peaks with the whole
    cache in HBM and with all of it off, then checked; if none fits, ``offloaded`` is returned."""
    plan = offloaded.plan
    in_hbm = evaluate_plan(model, workload, cluster, plan.with_changes(
        stages=tuple(replace(s, kv_cache_in="hbm") for s in plan.stages)), runtime=runtime)
    capacity = cluster.device.memory_bytes
    shares = [(a.peak_memory_bytes - capacity) / (a.peak_memory_bytes - b.peak_memory_bytes)
              for a, b in zip(in_hbm.stages, offloaded.estimate.stages) if a.peak_memory_bytes > capacity]
    share = math.ceil(max(shares + [0.01]) * 100) / 100
    if share >= 1.0:
        return offloaded
    candidate = _with_kv_share(plan, share)
    estimate = evaluate_plan(model, workload, cluster, candidate, runtime=runtime)
    return Scored(plan=candidate, estimate=estimate) if estimate.fits else offloaded


def best_plan(scored: list[Scored]) -> Scored | None:
    """The fitting plan with the highest TPS, preferring those that meet the serving targets."""
    fitting = [s for s in scored if s.estimate.fits]
    if not fitting:
        return None
    return max(fitting, key=lambda s: (s.estimate.inference.meets_targets, s.estimate.inference.tps))


def plan_label(plan: Plan) -> str:
    stage = plan.stages[0]
    label = f"tp={stage.tp} pp={plan.pp} dp={plan.dp} micro_batch={plan.micro_batch}"
    if stage.weights_in != "hbm":
        label += f" weights_in={stage.weights_in}"
    if stage.kv_cache_in != "hbm":
        label += f" kv_cache_in={stage.kv_cache_in}:{stage.kv_cache_in_share:.0%}"
    if stage.cache_group_layers:
        label += f" cache_group={stage.cache_group_layers}x{stage.cache_tile_tokens}"
    return label


def best_plan_note(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, gpus: int, runtime: Runtime) -> str:
    """What the best uniform plan on ``gpus`` reaches (for a missed serving target)."""
    best = best_plan(score_plans(model, workload, cluster, uniform_inference_plans(model, workload, gpus), runtime=runtime))
    if best is None:
        return f"no uniform plan on {gpus} GPUs fits"
    metrics = best.estimate.inference
    reached = ", ".join(f"{key[:-2].upper()} {getattr(metrics, key) * 1e3:.3f} ms" for key in ("tpot_s", "ttft_s")
                        if getattr(metrics, key) is not None)
    verdict = "meets the targets" if metrics.meets_targets else "misses them too"
    return f"the best uniform plan on {gpus} GPUs ({plan_label(best.plan)}) reaches {reached} and {verdict}"
