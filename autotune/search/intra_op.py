"""Intra-operator level: Optuna searches the choices of a stage on a submesh.

One study per (model-parallel size, data-parallel degree): each trial picks TP (CP follows),
recomputation, ZeRO stage and mesh order, and is scored for every micro-batch size, layer
count and pipeline position at once (autotune.search.tables). The objective is the fastest
per-sequence layer time among micro-batch sizes where a one-layer stage fits; memory is an
Optuna constraint (``trial.set_constraint``, feasible when <= 0). Expert choices are enqueued
first. A space of at most ``grid_max`` choices is enumerated by Optuna's grid sampler (a choice
costs less to score than a TPE suggestion), so such problems are solved exactly; larger ones
by seeded TPE with ``n_trials`` trials, deterministic per seed.

Partial recomputation (``recompute_layers``: full recomputation of the first N layers of a
stage) is not searched choice by choice: its cost is the interpolation
``none + min(N, n) / n * (full - none)`` of the stage's costs without and with full
recomputation (autotune/cost/recompute.py), so every count is scored from those two tables at
once, vectorised (:func:`with_partial_recompute`). ``--method exhaustive`` prices every count
through the cost model instead (:func:`stage_study`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from autotune.search.choices import StageChoice, enumerate_choices, make_choice
from autotune.search.space import SearchSpace
from autotune.search.tables import ChoiceCosts, SliceContext, choice_costs

__all__ = ["IntraOpResult", "optimize_stage", "expert_choices", "stage_study", "with_partial_recompute", "load_optuna"]

@dataclass(frozen=True, kw_only=True)
class IntraOpResult:
    model_parallel: int
    dp: int
    costs: tuple[ChoiceCosts, ...]  # every distinct choice the study evaluated
    num_trials: int


def expert_choices(values: dict[str, list], model_parallel: int, space: SearchSpace) -> list[dict]:
    """Megatron-style starting points: the widest TP with selective and with full recomputation,
    ZeRO-1 when available; the leanest (full recomputation, the highest ZeRO stage, the deepest
    offload). Inference: the widest TP with the KV cache in HBM, and with the most of it off."""
    base = {k: v[0] for k, v in values.items()}
    base["tp"] = max(values["tp"])
    if "recompute" not in values:
        return [base, {**base, "kv_cache": values["kv_cache"][-1]}]
    zero = 1 if 1 in values["zero"] else values["zero"][0]
    out = [{**base, "recompute": r, "zero": zero} for r in ("selective", "full", "none") if r in values["recompute"]]
    if "full" in values["recompute"]:
        out.append({**base, "recompute": "full", "zero": max(values["zero"]), "offload": values["offload"][-1]})
    return out


def _objective_value(costs: ChoiceCosts, ctx: SliceContext, capacity: float) -> tuple[float, float]:
    """(seconds per sequence of all layers on one stage, memory excess ratio of one layer), at
    the stage's least costly position."""
    b = np.array(ctx.micro_batches, dtype=float)
    pos = int(np.argmin(costs.time_s[0, -1]))
    per_layer = costs.time_s[:, -1, pos] / b
    need = costs.mem_base_bytes[:, 1, pos] + costs.mem_per_microbatch_bytes[:, 1, pos]
    fits = need <= capacity
    value = float(per_layer[fits].min()) if fits.any() else float(per_layer.min())
    return value, float(need.min() / capacity - 1.0)


def load_optuna() -> None:
    """Import Optuna now: forked study workers (autotune.search.parallel) then inherit it
    instead of each importing it again."""
    import optuna  # noqa: F401


def _sampler(space: SearchSpace, values: dict[str, list], size: int, seed: int):
    import optuna

    seed %= 2**32  # numpy's generators take 0 .. 2**32 - 1; a study's seed adds 1000 x dp to the user's
    if size <= space.grid_limit:  # the whole grid, in a seeded order
        return optuna.samplers.GridSampler(values, seed=seed)
    if space.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=min(8, space.n_trials // 2))


def optimize_stage(ctx: SliceContext, space: SearchSpace, values: dict[str, list], model_parallel: int,
                   seed: int) -> IntraOpResult:
    """Run the intra-op study of one (model-parallel size, dp) problem."""
    import optuna  # here, not at import: small spaces are enumerated without it (autotune.search.driver)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    size = math.prod(len(v) for v in values.values())
    training = "recompute" in values
    capacity = ctx.cluster.device.memory_bytes
    study = optuna.create_study(direction="minimize", sampler=_sampler(space, values, size, seed))
    if size > space.grid_limit:  # a sampled space starts from the expert choices (a grid covers them)
        for params in expert_choices(values, model_parallel, space):
            study.enqueue_trial(params, skip_if_exists=True)
    evaluated: dict[StageChoice, ChoiceCosts] = {}

    def objective(trial) -> float:
        params = {k: trial.suggest_categorical(k, v) for k, v in values.items()}
        choice = make_choice(space, model_parallel, params, training)
        if choice not in evaluated:
            evaluated[choice] = choice_costs(ctx, choice)
        value, excess = _objective_value(evaluated[choice], ctx, capacity)
        trial.set_constraint("memory", excess)
        return value

    n_trials = size if size <= space.grid_limit else space.n_trials
    study.optimize(objective, n_trials=n_trials)
    return IntraOpResult(model_parallel=model_parallel, dp=ctx.dp, costs=tuple(evaluated.values()),
                         num_trials=len(study.get_trials(deepcopy=False)))  # study.trials deep-copies every trial


def _enumerated(ctx: SliceContext, space: SearchSpace, values: dict[str, list], model_parallel: int) -> IntraOpResult:
    """Every distinct choice of ``values`` priced by the cost model (no Optuna trial each)."""
    choices = enumerate_choices(space, model_parallel, values, training="recompute" in values)
    costs = tuple(choice_costs(ctx, c) for c in choices)
    return IntraOpResult(model_parallel=model_parallel, dp=ctx.dp, costs=costs, num_trials=len(costs))


def stage_study(ctx: SliceContext, space: SearchSpace, values: dict[str, list], model_parallel: int, seed: int,
                exhaustive: bool = False) -> IntraOpResult:
    """The stage choices of one (model-parallel size, dp) problem: all of them priced one by one
    (``exhaustive``), or the space without partial-recomputation counts enumerated (at most
    ``grid_limit`` choices) or sampled by Optuna, then every count scored vectorised."""
    if exhaustive:
        return _enumerated(ctx, space, values, model_parallel)
    counts = [k for k in values.get("recompute_layers", []) if k > 0]
    base = {k: v for k, v in values.items() if k != "recompute_layers"}
    if math.prod(len(v) for v in base.values()) <= space.grid_limit:
        result = _enumerated(ctx, space, base, model_parallel)
    else:
        result = optimize_stage(ctx, space, base, model_parallel, seed)
    return with_partial_recompute(ctx, result, counts) if counts else result


def _blend(none: np.ndarray, full: np.ndarray, f: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """none + f (full - none) where the count is below the layer count n, inf elsewhere (there
    the count is every layer: plain full recomputation, already a choice)."""
    with np.errstate(invalid="ignore"):
        out = none + f * (full - none)
    return np.where(counted & np.isfinite(none) & np.isfinite(full), out, np.inf)


def with_partial_recompute(ctx: SliceContext, result: IntraOpResult, counts: list[int]) -> IntraOpResult:
    """``result`` plus, for each full-recomputation choice, the same choice recomputing only
    the first N layers of its stage for every N in ``counts``, interpolated between the choice
    and its no-recomputation twin (priced here when the study did not)."""
    by_choice = {c.choice: c for c in result.costs}
    extra, trials = [], 0
    n = np.arange(result.costs[0].time_s.shape[1], dtype=float)[None, :, None] if result.costs else None
    for full in [c for c in result.costs if c.choice.recompute == "full" and c.choice.recompute_layers == 0]:
        twin = replace(full.choice, recompute="none")
        if twin not in by_choice:
            by_choice[twin] = choice_costs(ctx, twin)
            extra.append(by_choice[twin])
            trials += 1
        none = by_choice[twin]
        for k in counts:
            counted = n > k
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.where(counted, k / np.maximum(n, 1.0), 1.0)
            extra.append(ChoiceCosts(
                choice=replace(full.choice, recompute_layers=k),
                time_s=_blend(none.time_s, full.time_s, f, counted), tail_s=_blend(none.tail_s, full.tail_s, f, counted),
                mem_base_bytes=_blend(none.mem_base_bytes, full.mem_base_bytes, f, counted),
                mem_per_microbatch_bytes=_blend(none.mem_per_microbatch_bytes, full.mem_per_microbatch_bytes, f, counted)))
    return IntraOpResult(model_parallel=result.model_parallel, dp=result.dp, costs=result.costs + tuple(extra),
                         num_trials=result.num_trials + trials)
