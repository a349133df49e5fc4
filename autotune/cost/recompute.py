"""Per-stage variants priced from the plain stage cost: partial recomputation and FP8 GEMMs.

Partial recomputation (Megatron-LM ``--recompute-granularity full --recompute-method block
--recompute-num-layers N``): the first ``k = min(N, n)`` of a stage's ``n`` layers keep only
their input and run their forward again in backward; the other ``n - k`` keep every
activation and recompute nothing. Every per-layer term of the stage cost (kernels, the TP/CP
collectives repeated by the recomputed forward, saved activations) is a sum over layers, so
the stage costs ``(1 - f) * cost(none) + f * cost(full)`` with ``f = k / n``; the terms that do
not depend on the recomputation (weights, optimizer, embedding and head) are the same in both
and come out unchanged. Overlap terms (max(0, comm - compute)) are interpolated too, a close
upper bound of the exact per-layer sum since they are convex.

FP8 on one stage (Megatron-LM ``--fp8-format hybrid``; Transformer Engine per-tensor scaling):
the stage is priced as the workload's ``fp8`` recipe (autotune.spec.workload: FP8 GEMMs, BF16
elsewhere, the FP8 weight copy in memory), on a device with an FP8 GEMM rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass, replace
from functools import lru_cache

import numpy as np

from autotune.errors import AutotuneError, require
from autotune.plan.plan import StagePlan
from autotune.spec.workload import LOW_PRECISION_DTYPES

__all__ = ["has_variant", "variant_stage_cost", "recompute_fraction", "blend_costs", "fp8_context", "plain_stage"]


def has_variant(stage: StagePlan) -> bool:
    return bool(stage.fp8 or stage.recompute_layers)


def recompute_fraction(stage: StagePlan, num_layers):
    """Share of the stage's layers that are recomputed: min(N, n) / n (1 for full, 0 for none)."""
    if stage.recompute != "full":
        return 0.0 * np.asarray(num_layers)
    if stage.recompute_layers == 0:
        return 1.0 + 0.0 * np.asarray(num_layers)
    n = np.asarray(num_layers, dtype=float)
    return np.minimum(float(stage.recompute_layers), n) / n


def blend_costs(none, full, f):
    """``none + f * (full - none)`` field by field through nested dataclasses (StageCost)."""
    if is_dataclass(none):
        return replace(none, **{x.name: blend_costs(getattr(none, x.name), getattr(full, x.name), f)
                                for x in fields(none) if x.init})
    return none + f * (np.asarray(full) - np.asarray(none)) if np.ndim(f) or f else none


def fp8_context(ctx):
    """The stage context with the workload's GEMMs in FP8 (a BF16 workload only); one twin per
    context (by identity, as _fp8_workload: a search prices a context's FP8 choices at every position)."""
    dtype = ctx.workload.dtype
    if dtype in LOW_PRECISION_DTYPES:
        return ctx  # already a low-precision recipe everywhere
    require(dtype == "bf16", "stage.fp8", f"FP8 stages need a bf16 workload (FP8 GEMMs, BF16 elsewhere), not {dtype!r}")
    if "fp8" not in ctx.cluster.device.peak_flops:
        raise AutotuneError("stage.fp8", f"{ctx.cluster.device.name} has no FP8 GEMM rate")
    found = _FP8_CONTEXTS.get(id(ctx))
    if found is None or found[0] is not ctx:
        if len(_FP8_CONTEXTS) >= _FP8_WORKLOADS_KEPT:
            _FP8_CONTEXTS.pop(next(iter(_FP8_CONTEXTS)))
        found = _FP8_CONTEXTS[id(ctx)] = (ctx, replace(ctx, workload=_fp8_workload(ctx.workload)))
    return found[1]


_FP8_WORKLOADS: dict = {}  # id(workload) -> (workload, its FP8 twin): one twin per workload, so
_FP8_WORKLOADS_KEPT = 64  # caches keyed by the workload's identity (cost/moe_stage.py) keep hitting
_FP8_CONTEXTS: dict = {}  # id(context) -> (context, its FP8 twin), as many kept


def _fp8_workload(workload):
    found = _FP8_WORKLOADS.get(id(workload))
    if found is None or found[0] is not workload:
        if len(_FP8_WORKLOADS) >= _FP8_WORKLOADS_KEPT:
            _FP8_WORKLOADS.pop(next(iter(_FP8_WORKLOADS)))
        found = _FP8_WORKLOADS[id(workload)] = (workload, replace(workload, dtype="fp8"))
    return found[1]


@lru_cache(maxsize=4096)
def plain_stage(stage: StagePlan) -> StagePlan:
    """The stage without FP8 and with every layer recomputed as its kind says (kept: a search
    prices a variant's plain stage at every position and degree, and a StagePlan validates itself)."""
    return replace(stage, fp8=False, recompute_layers=0)


def variant_stage_cost(cost: Callable, ctx, stage: StagePlan, pos, num_layers=None):
    """``cost(ctx, stage, pos, num_layers)`` of a stage with FP8 or partial recomputation."""
    if stage.fp8:
        ctx = fp8_context(ctx)
    plain = plain_stage(stage)
    n = stage.num_layers if num_layers is None else num_layers
    f = recompute_fraction(stage, n)
    if not stage.recompute_layers or np.all(f >= 1.0):
        return cost(ctx, plain, pos, num_layers)
    full = cost(ctx, plain, pos, num_layers)
    none = cost(ctx, replace(plain, recompute="none"), pos, num_layers)
    return blend_costs(none, full, f if np.ndim(f) else float(f))
