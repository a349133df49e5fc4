"""Run a search: solve slices (or resume them from a study), keep the best, add baselines."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError, NoPlanError
from autotune.graph.table import model_tables
from autotune.plan.plan import Plan
from autotune.search.baselines import baselines
from autotune.search.cache import fingerprint
from autotune.search.driver import SearchProblem, SliceKey, SliceOutcome, SliceSearch, plan_slices
from autotune.search.result import SearchResult, SearchStats
from autotune.spec.workload import is_training

__all__ = ["run_search", "gpus_needed"]

Progress = Callable[[SliceOutcome, int, int], None]


def _round(problem: SearchProblem) -> str:
    return "offload" if problem.space.offload != ("none",) and problem.space.offload == problem.space.offload_fallback else "base"


def _resumed(problem: SearchProblem, study) -> dict[SliceKey, SliceOutcome]:
    """Slices a previous (interrupted) run of this study already finished, re-scored."""
    out = {}
    if study is None or hasattr(study, "records"):  # none, or a new StudyFile (autotune.search.study_file)
        return {}
    from autotune.search.store import finished_slices  # Optuna only when a study is kept

    for (dp, b), trial in finished_slices(study, _round(problem)).items():
        key = SliceKey(dp, b)
        plan_json = trial.user_attrs.get("plan")
        plan = Plan.from_dict(json.loads(plan_json)) if plan_json else None
        estimate = evaluate_plan(problem.model, problem.workload, problem.cluster, plan,
                                 runtime=problem.runtime) if plan else None
        out[key] = SliceOutcome(key=key, plan=plan, estimate=estimate, lower_bound_s=trial.user_attrs.get("lower_bound_s", 0.0),
                                pruned=trial.state.name == "PRUNED")
    return out


def gpus_needed(problem: SearchProblem) -> int:
    """A lower bound on the GPUs this model needs: its weights, gradients and optimizer states
    sharded over all of them (ZeRO-3) in the usable memory of each, with the runtime's allocator
    reserve beyond them (cost/memory.py StageMemory)."""
    w = problem.workload
    params = model_tables(problem.model, w.seq_len, w.activation_bytes, w.attention_impl).num_params
    per_param = (16.0 if w.dtype == "fp32" else 18.0) * (1.0 + problem.runtime.allocator_reserve_share)
    need = math.ceil(params * per_param / problem.cluster.device.usable_memory_bytes)
    per_node = problem.cluster.gpus_per_node
    return 1 << max(0, need - 1).bit_length() if need <= per_node else math.ceil(need / per_node) * per_node


def _meets_targets(outcome: SliceOutcome) -> bool:
    """Serving targets (TPOT, TTFT) of an inference workload, when it has them."""
    return bool(outcome.estimate is not None and (outcome.estimate.inference is None
                                                   or outcome.estimate.inference.meets_targets))


def _best(outcomes: Iterable[SliceOutcome]) -> SliceOutcome | None:
    fitting = [o for o in outcomes if math.isfinite(o.step_time_s) and _meets_targets(o)]
    return min(fitting, key=lambda o: (o.step_time_s, o.key)) if fitting else None


def _missed_targets(problem: SearchProblem, outcomes: dict[SliceKey, SliceOutcome]) -> None:
    """When plans fit but none meets the serving targets, say what the fastest one reaches."""
    fitting = [o for o in outcomes.values() if math.isfinite(o.step_time_s)]
    if fitting and not is_training(problem.workload):
        from autotune.cost.inference_plan import require_targets

        w = problem.workload
        metric = "tpot_s" if w.target_tpot_s else "ttft_s"
        closest = min(fitting, key=lambda o: getattr(o.estimate.inference, metric, None) or o.step_time_s)
        try:
            require_targets(closest.estimate, w, f"no plan of the search meets it; this is the lowest "
                                                f"{metric[:-2].upper()} among the {len(fitting)} slices' best plans")
        except AutotuneError as err:  # a valid request with a negative answer
            raise NoPlanError(err.field, err.message) from None


def plan_in_space(plan: Plan, space) -> bool:
    """Whether every stage's choices are values the space offers (framework spaces restrict them)."""
    stages = plan.stages
    if len(stages) > space.max_stages or (space.uniform_stages and len({(s.tp, s.cp, s.zero, s.recompute) for s in stages}) > 1):
        return False
    return all(s.tp in space.tp and s.cp in space.cp and s.zero in space.zero and s.recompute in space.recompute
               and s.mesh_order in space.mesh_order for s in stages) and plan.vpp in space.vpp


def _can_fall_back(problem: SearchProblem) -> bool:
    space = problem.space
    return (is_training(problem.workload) and bool(space.offload_fallback)
            and set(space.offload_fallback) != set(space.offload))


def _solve_slices(problem: SearchProblem, keys: list[SliceKey], study, progress, search: SliceSearch
                  ) -> tuple[dict[SliceKey, SliceOutcome], int]:
    """Every slice's outcome (resumed ones first), committing each to ``study`` as it finishes."""
    outcomes = _resumed(problem, study)
    resumed = len(outcomes)
    todo = [k for k in keys if k not in outcomes]
    best = [_best(outcomes.values())]  # kept as outcomes come (the search asks for it after every slice)
    for i, outcome in enumerate(search.iter_outcomes(todo, lambda: best[0].step_time_s if best[0] else math.inf)):
        outcomes[outcome.key] = outcome
        best[0] = _best([o for o in (best[0], outcome) if o is not None])
        if hasattr(study, "records"):  # a StudyFile: plain sqlite3
            study.record(outcome, _round(problem))
        elif study is not None:
            from autotune.search.store import record_slice

            record_slice(study, outcome, _round(problem))
        if progress:
            progress(outcome, i + 1, len(todo))
    return outcomes, resumed


def _with_baselines(problem: SearchProblem, best: SliceOutcome, made: tuple | None = None):
    """The baselines (``made``: scored already, by a worker process beside the search's first
    tables), and the best plan: a baseline the space allows but the search missed wins, and the
    result says so."""
    extras = baselines(problem) if made is None else made
    plan, estimate, source = best.plan, best.estimate, "search"
    for baseline in extras:
        if (baseline.estimate is not None and baseline.estimate.fits and plan_in_space(baseline.plan, problem.space)
                and baseline.estimate.step_time_s < estimate.step_time_s):
            plan, estimate, source = baseline.plan, baseline.estimate, f"baseline {baseline.name}"
    return extras, plan, estimate, source


def _no_plan_reason(problem: SearchProblem, outcomes: dict[SliceKey, SliceOutcome], search: SliceSearch) -> str:
    """Why nothing fits: memory (the plans built all overflow, or none could be laid out in
    memory), or no plan shape uses the GPUs."""
    where = f"{problem.gpus} GPUs of {problem.cluster.name}"
    built = [o.estimate for o in outcomes.values() if o.estimate is not None]
    need = gpus_needed(problem)  # a bound for any plan: every state sharded over every GPU
    shaped = search.uniform is not None and search.has_shapes()  # shapes exist: memory is what failed
    if built or need > problem.gpus or shaped:
        capacity = f"{problem.cluster.device.memory_bytes / 2**30:.1f} GiB"
        if need > problem.gpus:
            more = f"it needs at least {need} GPUs of {capacity} for its weights and optimizer states alone"
        elif built:
            more = (f"the plan with the least memory needs "
                    f"{min(e.peak_memory_bytes_per_gpu for e in built) / 2**30:.1f} GiB of {capacity} per GPU")
        else:
            more = f"no stage of its plans holds its layers and micro-batches in {capacity} per GPU"
        return f"{problem.model.name} does not fit on {where} with any plan of the space: {more}"
    return (f"no plan of the space splits {problem.model.name} ({problem.model.num_layers} layers) over exactly {where}: "
            f"the global batch {problem.workload.global_batch} divides among dp {_few(sorted({k.dp for k in outcomes}))}, "
            f"and no cut of the layers into stages on submeshes of {_few(search.stage_sizes(1))} GPUs fills the GPUs "
            f"of a replica; use fewer GPUs, a count that divides the batch, or a larger batch")


def _few(values: list[int], most: int = 8) -> str:
    shown = ", ".join(map(str, values[:most]))
    return shown + (f" ... {values[-1]} ({len(values)} in all)" if len(values) > most else "")


def _shared_trials(study) -> int:
    from autotune.search.store import shared_trials

    return shared_trials(study)


def run_search(problem: SearchProblem, *, study=None, progress: Progress | None = None, cache=None,
               shared: bool = False, started_s: float | None = None, with_baselines: bool = True) -> SearchResult:
    """The fastest plan that fits; finished slices go to ``study`` (Optuna) as they complete.
    ``cache`` (a PlanCache) returns a finished result of the same problem, and lends intra-op
    studies to other GPU counts of the same model, workload and cluster. ``shared``: the
    study's slices were solved by this process and its workers (not resumed from a run).
    ``with_baselines``: score the hand-made baselines beside the search (and let one the space
    allows win if the search missed it); without them the result's baselines are empty."""
    start = time.perf_counter() if started_s is None else started_s
    problem.cluster.check_gpus(problem.gpus)
    keys = plan_slices(problem)
    if not keys:
        raise NoPlanError("gpus", f"no data-parallel degree divides both {problem.gpus} GPUs and the global batch "
                                    f"{problem.workload.global_batch}; change --global-batch or --gpus")
    result_key = fingerprint(problem, with_baselines) if cache is not None and study is None else None
    if result_key is not None and (found := cache.result(result_key)) is not None:
        return found
    search = SliceSearch(problem, cache=cache, with_baselines=with_baselines)
    outcomes, resumed = _solve_slices(problem, keys, study, progress, search)
    best = _best(outcomes.values())
    if best is None and _can_fall_back(problem) and search.has_shapes():  # nothing fits in HBM: offload
        wider = replace(problem, space=replace(problem.space, offload=problem.space.offload_fallback))
        return run_search(wider, study=study, progress=progress, cache=cache, shared=shared, started_s=start,
                          with_baselines=with_baselines)
    if best is None:
        _missed_targets(problem, outcomes)
        raise NoPlanError("gpus", _no_plan_reason(problem, outcomes, search))
    extras, plan, estimate, source = (_with_baselines(problem, best, search.baselines) if with_baselines
                                      else ((), best.plan, best.estimate, "search"))
    pruned = sum(1 for o in outcomes.values() if o.pruned)
    stats = SearchStats(method=problem.method, wall_time_s=time.perf_counter() - start, num_slices=len(keys),
                        num_slices_solved=len(outcomes) - pruned, num_slices_pruned=pruned, num_slices_resumed=0 if shared else resumed,
                        num_intra_op_studies=search.num_studies,
                        num_trials=search.num_trials + (_shared_trials(study) if shared else 0), best_from=source)
    candidates = tuple((o.plan, o.estimate) for o in outcomes.values() if o.plan is not None and o.estimate is not None)
    result = SearchResult(plan=plan, estimate=estimate, baselines=extras, stats=stats, candidates=candidates,
                          runtime=problem.runtime)
    if result_key is not None:
        cache.store_result(result_key, result)
    return result
