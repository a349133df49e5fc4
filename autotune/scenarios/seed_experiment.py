"""The seed experiment (seed 004): a 16-layer dense model on 16 H100, TP8 x PP2 vs layer-wise PP16.

The seed reports "TPS" and "TPOT" for batch 128 x sequence 10,000 without saying which phase
they measure; its TPOT is exactly 1 / TPS (0.078 ms = 1 / 12,800 tokens/s), a time per token of
the whole system, not a per-request inter-token latency. Both readings are evaluated:

* ``prefill``: the 128 prompts of 10,000 tokens run once and fill the KV cache;
* ``decode``: one decode step at a 10,000-token context (prompt 9,999, one generated token,
  the model's maximum length), for all 128 sequences.

Each named plan keeps its degrees; its micro-batch and the KV cache's tier (HBM or host) are the
best valid ones for it, so neither plan loses to a poor micro-batch. ``best uniform`` is the
exhaustive best over all uniform plans (scenarios/serving.py); the searched plan of the stage
search can be passed in as ``extra_plans``. The seed's figures are a claim, shown beside the
model's, not a target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.cost.cache import PERSISTING_FRACTION, cache_tier, layer_weight_bytes
from autotune.cost.estimate import Estimate
from autotune.cost.inference import inference_tables
from autotune.plan.plan import Plan
from autotune.spec.runtime import resolve_runtime
from autotune.search.serving import Scored, best_plan, plan_label, score_plans, uniform_inference_plans
from autotune.spec.hardware import ClusterSpec
from autotune.spec.hardware_data import load_cluster
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset
from autotune.spec.workload import InferenceWorkload

__all__ = ["SEED_CLAIMS", "NAMED_DEGREES", "Row", "SeedComparison", "seed_workloads", "seed_comparison",
           "format_markdown", "comparison_dict"]

MODEL, CLUSTER, GPUS, BATCH, SEQ_LEN = "seed-dense-16", "dgx-h100", 16, 128, 10_000
NAMED_DEGREES = {"tp8-pp2": (8, 2), "layerwise-pp16": (1, 16)}  # (tp, pp)
SEED_CLAIMS = {"tp8-pp2": (12_800.0, 0.078e-3), "layerwise-pp16": (15_360.0, 0.065e-3)}  # (TPS, "TPOT" s)


def seed_workloads() -> dict[str, InferenceWorkload]:
    return {"prefill": InferenceWorkload(kind="prefill", batch=BATCH, prompt_len=SEQ_LEN),
            "decode": InferenceWorkload(kind="decode", batch=BATCH, prompt_len=SEQ_LEN - 1, output_len=1)}


@dataclass(frozen=True, kw_only=True)
class Row:
    name: str
    workload: str
    plan: Plan
    estimate: Estimate

    @property
    def tps(self) -> float:
        return self.estimate.inference.tps


@dataclass(frozen=True, kw_only=True)
class SeedComparison:
    rows: tuple[Row, ...]
    bounds: dict[str, str]  # per workload: the hardware bound the rows are measured against
    why: dict[str, str]  # per workload: why the best named plan beats the other
    cache: str  # what cache-aware grouping can do for this model (the seed's proposal)


def _best_for(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec, **degrees: int) -> Scored:
    """The best fitting plan with these degrees (or, if none fits, the fastest, marked by fits=False)."""
    scored = score_plans(model, workload, cluster, uniform_inference_plans(model, workload, GPUS, **degrees),
                         runtime=resolve_runtime(None))
    return best_plan(scored) or max(scored, key=lambda s: s.estimate.inference.tps)


def _bound(model: ModelSpec, workload: InferenceWorkload, cluster: ClusterSpec) -> str:
    """Prefill: all FLOPs at the GPUs' peak; decode: the KV cache and weights read once per token
    at the GPUs' peak HBM bandwidth (a roofline bound no plan can beat)."""
    device = cluster.device
    e = workload.activation_bytes
    if workload.kind == "prefill":
        per_seq = model.num_layers * (12 * model.hidden_size ** 2 * workload.prompt_len
                                      + 2 * workload.prompt_len ** 2 * model.hidden_size)  # causal attention
        seconds = workload.batch * per_seq / (GPUS * device.peak(workload.dtype))
        return f"compute bound: {workload.batch * workload.prompt_len / seconds:,.0f} tokens/s at peak bf16 on {GPUS} GPUs"
    kv = workload.batch * workload.max_context_len * model.num_layers * 2 * model.kv_dim * e
    weights = model.num_layers * 12 * model.hidden_size ** 2 / 2 * e  # 6 h^2 parameters per layer
    seconds = (kv + weights) / (GPUS * device.tier("hbm").bandwidth_bytes_per_s)
    return (f"HBM bound: {kv / 1e12:.2f} TB of KV cache + {weights / 1e9:.0f} GB of weights read per token step "
            f"-> at most {workload.batch / seconds:,.0f} tokens/s at peak HBM bandwidth, if the cache fitted in HBM "
            f"({GPUS} x {device.memory_bytes / 1e9:.0f} GB)")


def _cache_note(model: ModelSpec, cluster: ClusterSpec) -> str:
    """Whether any layer group fits the persisting L2 at the named plans' tensor-parallel degrees."""
    table = inference_tables(model, seed_workloads()["decode"], "decode").layer
    capacity = PERSISTING_FRACTION * cache_tier(cluster.device).capacity_bytes
    shards = ", ".join(f"{layer_weight_bytes(table, tp) / 2**20:,.0f} MiB at tp={tp}" for tp in sorted({t for t, _ in NAMED_DEGREES.values()}))
    largest_tp = max(t for t in range(1, GPUS + 1) if model.num_heads % t == 0 and GPUS % t == 0)
    fits = layer_weight_bytes(table, largest_tp) <= capacity
    return (f"cache-aware grouping: one layer's weight shard is {shards}; the persisting L2 of {cluster.device.name} "
            f"holds {capacity / 2**20:.1f} MiB, so no layer group fits"
            + ("" if not fits else f" except at tp={largest_tp}") + ": weights stream from HBM in every plan")


def _explain(winner: Row, other: Row) -> str:
    """The breakdown parts that differ most between two plans, in seconds."""
    a, b = winner.estimate, other.estimate
    diffs = sorted(a.breakdown, key=lambda k: -abs(b.breakdown[k] - a.breakdown[k]))
    parts = [f"{k[:-2]} {a.breakdown[k]:.4g} s vs {b.breakdown[k]:.4g} s" for k in diffs[:3]
             if abs(b.breakdown[k] - a.breakdown[k]) > 1e-3 * b.step_time_s]
    fit = "" if b.fits else f"; {other.name} does not fit: {b.reason}"
    return (f"{winner.name} ({plan_label(winner.plan)}) takes {a.step_time_s:.4g} s against {b.step_time_s:.4g} s "
            f"for {other.name} ({b.step_time_s / a.step_time_s:.2f}x); largest differences: " + "; ".join(parts) + fit)


def _searched(model: ModelSpec, workload: InferenceWorkload, phase: str) -> Row:
    """The plan `autotune search` finds for this reading (stage DP + intra-op Optuna)."""
    from autotune.search.api import search

    result = search(model, GPUS, cluster=CLUSTER, workload=workload)
    return Row(name="searched", workload=phase, plan=result.plan, estimate=result.estimate)


def seed_comparison(extra_plans: dict[str, Plan] | None = None, *, include_best_uniform: bool = True,
                    include_searched: bool = False) -> SeedComparison:
    """Evaluate the named plans (and ``extra_plans``; with ``include_searched``, the plan the
    search finds for each reading) under both readings."""
    model, cluster = load_preset(MODEL), load_cluster(CLUSTER)
    rows, bounds, why = [], {}, {}
    for phase, workload in seed_workloads().items():
        named = [Row(name=name, workload=phase, plan=s.plan, estimate=s.estimate) for name, (tp, pp) in NAMED_DEGREES.items()
                 for s in [_best_for(model, workload, cluster, tp=tp, pp=pp)]]
        rows += named
        if include_searched:
            rows.append(_searched(model, workload, phase))
        if include_best_uniform:
            best = _best_for(model, workload, cluster)
            rows.append(Row(name="best-uniform", workload=phase, plan=best.plan, estimate=best.estimate))
        for name, plan in (extra_plans or {}).items():
            rows += [Row(name=name, workload=phase, plan=s.plan, estimate=s.estimate)
                     for s in score_plans(model, workload, cluster, iter([plan]), runtime=resolve_runtime(None), tune_kv_share=False)]
        ranked = sorted(named, key=lambda r: (not r.estimate.fits, -r.tps))
        why[phase], bounds[phase] = _explain(ranked[0], ranked[1]), _bound(model, workload, cluster)
    return SeedComparison(rows=tuple(rows), bounds=bounds, why=why, cache=_cache_note(model, cluster))


def _fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:,.0f}" if seconds >= 1.0 else f"{seconds * 1e3:.4g}"


def format_markdown(result: SeedComparison) -> str:
    """The comparison as Markdown: a table per reading, the bound, the time breakdown, and why."""
    lines = ["# Seed experiment (seed 004): seed-dense-16, batch 128 x 10,000 tokens, 16 x H100 (dgx-h100)", ""]
    claims = ", ".join(f"{k} {tps:,.0f} TPS / {t * 1e3:.3f} ms" for k, (tps, t) in SEED_CLAIMS.items())
    lines += [f"Seed's claim (TPOT = 1/TPS): {claims}.", "", result.cache + ".", ""]
    keys = list(result.rows[0].estimate.breakdown)
    for phase in seed_workloads():
        rows = [r for r in result.rows if r.workload == phase]
        lines += [f"## {phase}", "", result.bounds[phase], "",
                  "| plan | degrees | fits | TPS | 1/TPS (ms) | TPOT (ms) | TTFT (ms) | peak GiB/GPU | "
                  + " | ".join(k[:-2] + " (s)" for k in keys) + " |",
                  "|" + "---|" * (8 + len(keys))]
        for r in rows:
            e = r.estimate
            lines.append(f"| {r.name} | {plan_label(r.plan)} | {'yes' if e.fits else 'no'} | {r.tps:,.0f} | "
                         f"{_fmt_ms(e.inference.time_per_token_s)} | {_fmt_ms(e.inference.tpot_s)} | "
                         f"{_fmt_ms(e.inference.ttft_s)} | {e.peak_memory_bytes_per_gpu / 2**30:.1f} | "
                         + " | ".join(f"{e.breakdown[k]:.4g}" for k in keys) + " |")
        lines += ["", f"Why: {result.why[phase]}", ""]
    return "\n".join(lines)


def comparison_dict(result: SeedComparison) -> dict[str, Any]:
    return {"rows": [{"name": r.name, "workload": r.workload, "plan": r.plan.to_dict(),
                      "estimate": r.estimate.to_dict(stages=False)} for r in result.rows],
            "bounds": result.bounds, "why": result.why, "cache": result.cache,
            "seed_claims": {k: {"tps": v[0], "tpot_s": v[1]} for k, v in SEED_CLAIMS.items()}}
