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
    """The priced choices of one (stage size, dp) study. Partial recomputation counts are not
    tables of their own: each (full, none) index pair in ``pairs`` stands for its choice with
    every count in ``counts``, interpolated when the stage tables are reduced (tables.py)."""

    model_parallel: int
    dp: int
    costs: tuple[ChoiceCosts, ...]  # every distinct choice the study evaluated
    num_trials: int
    pairs: tuple[tuple[int, int], ...] = ()  # (full recomputation, its no-recomputation twin) indices
    counts: tuple[int, ...] = ()

    def choice(self, index: int) -> StageChoice:
        """The choice at a reduced table's index: a priced one, or a count of a pair (after them)."""
        if index < len(self.costs):
            return self.costs[index].choice
        pair, k = divmod(index - len(self.costs), len(self.counts))
        return replace(self.costs[self.pairs[pair][0]].choice, recompute_layers=self.counts[k])


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


def with_partial_recompute(ctx: SliceContext, result: IntraOpResult, counts: list[int]) -> IntraOpResult:
    """``result`` standing also for each full-recomputation choice recomputing only the first N
    layers of its stage, for every N in ``counts``: its no-recomputation twin is priced here when
    the study did not, and the counts are interpolated between the two when the tables are
    reduced (tables.best_by_inflight), so no count has a table of its own."""
    by_choice = {c.choice: i for i, c in enumerate(result.costs)}
    costs, pairs, trials = list(result.costs), [], 0
    for i, full in enumerate(result.costs):
        if full.choice.recompute != "full" or full.choice.recompute_layers:
            continue
        twin = replace(full.choice, recompute="none")
        if twin not in by_choice:
            by_choice[twin] = len(costs)
            costs.append(choice_costs(ctx, twin))
            trials += 1
        pairs.append((i, by_choice[twin]))
    return IntraOpResult(model_parallel=result.model_parallel, dp=result.dp, costs=tuple(costs),
                         num_trials=result.num_trials + trials, pairs=tuple(pairs), counts=tuple(counts) if pairs else ())
