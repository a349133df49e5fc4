"""``autotune.evaluate``: predict the step time and memory of a plan you give (or one built
Megatron-style from parallel degrees). The library entry point beside ``autotune.search``."""

from __future__ import annotations

from typing import Any

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.cost.inference_plan import require_targets
from autotune.errors import require, require_type
from autotune.spec import arguments as A
from autotune.plan.builders import uniform_plan
from autotune.plan.runtime_plan import runtime_plan
from autotune.plan.plan import Plan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import resolve_runtime
from autotune.spec.resolve import DEFAULT_CLUSTER, resolve_cluster, training_workload
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

__all__ = ["evaluate"]


def _plan_option_names() -> set[str]:
    """Keywords that ``**plan_options`` may carry: the plan's and its stages' options that
    evaluate does not set itself."""
    import inspect
    from dataclasses import fields

    from autotune.plan.plan import StagePlan

    own = set(inspect.signature(evaluate.__wrapped__).parameters)
    stage = {f.name for f in fields(StagePlan)} - {"layers", "has_embedding", "has_head", "num_gpus"}
    return (set(inspect.signature(uniform_plan).parameters) | stage) - own - {"num_layers", "has_embeddings",
                                                                             "stage_options"}


def _plan_arg(name: str, value: Any) -> None:
    if value is not None:
        require_type(name, value, Plan, "None (a plan built from the degrees) or a Plan (autotune.plan.io.read_plan "
                                        "reads a plan.json)")


_EVALUATE_CHECKS = {"model": A.model_arg, "gpus": A.optional_count_arg, "cluster": A.cluster_arg,
                    "workload": A.workload_arg, "profile": A.profile_arg, "tp": A.count_arg, "pp": A.count_arg,
                    "dp": A.optional_count_arg, "cp": A.count_arg, "vpp": A.optional_count_arg,
                    "micro_batch": A.optional_count_arg,
                    "global_batch": A.optional_count_arg, "seq_len": A.optional_count_arg, "recompute": A.text_arg,
                    "zero": A.optional_int_arg, "dtype": A.text_arg, "attention": A.optional_text_arg, "runtime": A.runtime_arg,
                    "plan": _plan_arg}
# A plan gives every degree and option; a workload its batch, length and attention kernel.
_EVALUATE_EXCLUDES = {"plan": dict.fromkeys(("tp", "pp", "dp", "cp", "vpp", "micro_batch", "recompute", "sequence_parallel",
                                             "zero", "**")),
                      "workload": {"global_batch": "global_batch", "seq_len": "seq_len", "attention": "attention_impl",
                                   "dtype": "dtype"}}


@A.entry_point(_EVALUATE_CHECKS, extra=_plan_option_names, excludes=_EVALUATE_EXCLUDES)
def evaluate(model: str | ModelSpec, gpus: int | None = None, *, cluster: str | ClusterSpec = DEFAULT_CLUSTER,
             plan: Plan | None = None, workload: TrainingWorkload | InferenceWorkload | None = None, profile: Any = None,
             tp: int = 1, pp: int = 1, dp: int | None = None, cp: int = 1, vpp: int | None = None,
             micro_batch: int | None = None, global_batch: int | None = None, seq_len: int | None = None,
             recompute: str = "none", sequence_parallel: bool | None = None, zero: int | None = None, dtype: str = "bf16",
             attention: str | None = None, runtime: Any = None, **plan_options: Any) -> Estimate:
    """Predict step time and memory of a plan (given, or built Megatron-style from degrees) run by
    ``runtime`` (a preset name or a Runtime; None: megatron). A plan built from degrees takes what the
    runtime does where an argument is None or an option is not given (its ZeRO stage, micro-batches,
    interleaving, overlaps, resharding, pipeline split: autotune.plan.runtime_plan).

    ``sequence_parallel=None`` turns it on whenever ``tp > 1`` in training (inference runs TP
    with all-reduces). ``plan_options`` go to the plan (``overlap_grad_reduce``,
    ``overlap_tp_comm``, ``mesh_order``, ``kv_cache_in``, ``cache_group_layers``...). An
    inference workload that misses its serving target raises an AutotuneError saying what
    the plan and the best uniform plan on these GPUs reach.
    """
    require(sequence_parallel is None or isinstance(sequence_parallel, bool), "sequence_parallel",
            f"must be None (on with tp > 1), True or False, got {sequence_parallel!r}")
    require(plan is None or gpus is None or gpus == plan.gpus, "gpus",
            f"conflicts with the plan, which runs on {plan.gpus if plan else 0} GPUs: give {plan.gpus if plan else 0} or none")
    _check_plan_options(plan_options)
    spec = resolve_model(model)
    cluster_spec = resolve_cluster(cluster, profile)
    run_by = resolve_runtime(runtime)
    work = workload or training_workload(spec, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                                         attention=attention or run_by.attention_impl)
    if plan is None:
        require(gpus is not None, "gpus", "give the GPU count (or a plan)")
        cluster_spec.check_gpus(gpus)
        spec, plan = runtime_plan(run_by, spec, gpus=gpus, global_batch=work.global_batch, training=work.kind == "train",
                                  dtype=work.dtype,
                                  tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, micro_batch=micro_batch, zero=zero,
                                  recompute=recompute, sequence_parallel=sequence_parallel, **plan_options)
    estimate = evaluate_plan(spec, work, cluster_spec, plan, runtime=run_by)
    if estimate.inference is not None and not estimate.inference.meets_targets:
        from autotune.search.serving import best_plan_note  # enumerates plans: only when needed
        require_targets(estimate, work, best_plan_note(spec, work, cluster_spec, plan.gpus, run_by))
    return estimate


def _check_plan_options(options: dict[str, Any]) -> None:
    """Each plan option of the type Plan or StagePlan declares for it (``overlap_grad_reduce="no"``
    is refused, not read as true)."""
    import typing

    from autotune.plan.checks import check_value
    from autotune.plan.plan import StagePlan

    hints = {**typing.get_type_hints(StagePlan), **typing.get_type_hints(Plan)}
    for name, value in options.items():
        if name in hints:
            check_value(_as_json(value), hints[name], name)


def _as_json(value: Any) -> Any:
    """Tuples as lists, the form check_value reads (JSON's)."""
    return [_as_json(v) for v in value] if isinstance(value, tuple) else value
