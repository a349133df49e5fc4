"""Validate plans: prepare each case (scaled to this machine if asked), predict it with the
local profile, run it for real, and compare; one plan's failure never stops the others.

The numerics check: every case's losses over the first ``numerics_steps`` steps (dropout
off, the same batch each step) must match a single-process run of the same model and batch
within :func:`loss_tolerance`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError, require
from autotune.graph.table import model_tables
from autotune.plan.builders import uniform_plan
from autotune.plan.io import read_plan_file
from autotune.plan.plan import Plan
from autotune.spec.runtime import Runtime
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.workload import TrainingWorkload
from autotune.validate.job import RunConfig
from autotune.validate.report import PlanResult, plan_label, summarize_run
from autotune.validate.scale import ScaleTarget, scale_case

__all__ = ["ValidateOptions", "PlanCase", "read_case", "prepare_case", "run_case", "validate_cases",
           "loss_tolerance", "default_world", "ddp_bucket_bytes"]


def default_world(device: str = "cpu") -> int:
    """Worker processes allowed by default: one per GPU, or one per core and at least 2."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return max(2, os.cpu_count() or 1)


@dataclass(frozen=True, kw_only=True)
class ValidateOptions:
    cluster: ClusterSpec
    runtime: Runtime  # whose prediction the measured step is compared with (torch: what runs here)
    scale: ScaleTarget | None = None
    max_world: int = 2
    timeout_s: float = 300.0
    numerics_steps: int = 3
    warmup_steps: int = 2
    measured_steps: int = 5
    backend: str = "gloo"  # "nccl": one GPU per worker


@dataclass(frozen=True, kw_only=True)
class PlanCase:
    """A plan ready to run: its (possibly scaled) model, workload and plan."""

    name: str
    source: str
    model: ModelSpec
    workload: TrainingWorkload
    plan: Plan
    notes: tuple[str, ...] = ()


def _profile_dtypes(cluster: ClusterSpec) -> tuple[str, ...]:
    return tuple(sorted({dtype for (op, dtype) in cluster.device.compute if op == "gemm"}))


def read_case(path: str | Path) -> tuple:
    """(model, workload, plan) of a plan file or run directory; raises AutotuneError on bad input."""
    content = read_plan_file(path)
    require(content.model is not None and content.workload is not None, "plan",
            f"{str(path)!r} is a bare plan; validate needs a plan file with its model and workload "
            "(as autotune search writes)")
    require(isinstance(content.workload, TrainingWorkload), "workload",
            "validate runs training plans; inference workloads are not in the reference runner")
    return content.model, content.workload, content.plan


def prepare_case(source: str, model: ModelSpec, workload: TrainingWorkload, plan: Plan,
                 options: ValidateOptions) -> PlanCase:
    """The case to run: scaled when asked, and within this machine's world size (else AutotuneError)."""
    notes: tuple[str, ...] = ()
    if options.scale is not None:
        case = scale_case(model, workload, plan, options.scale, _profile_dtypes(options.cluster))
        model, workload, plan, notes = case.model, case.workload, case.plan, case.notes
    require(plan.gpus <= options.max_world, "gpus",
            f"the plan needs {plan.gpus} processes, this machine allows {options.max_world}; "
            "use --scale to shrink it (or raise --max-world)")
    return PlanCase(name=plan_label(plan), source=source, model=model, workload=workload, plan=plan, notes=notes)


def loss_tolerance(dtype: str) -> float:
    """Relative loss tolerance against the single-process reference.

    fp32: 1e-4. Parallel layouts only reorder fp32 sums (a few ulps, ~1e-7 relative per
    reduction); measured differences on the presets after 3 steps are ~1e-7 relative, while a
    missing gradient reduction moves the loss by >1e-3 (tests/test_validate_numerics.py).
    bf16/fp16: 2e-2, a few roundings at 8 (bf16) or 11 (fp16) mantissa bits, with casts in
    different places under FSDP's mixed-precision policy than under autocast.
    """
    return 1e-4 if dtype == "fp32" else 2e-2


def ddp_bucket_bytes(case: PlanCase, cluster: ClusterSpec) -> float:
    """The plan's gradient bucket, or the one the cost model assumes: seed 002's optimum
    sqrt(s * o / beta) (autotune.cost.stage.overlapped_exposed_s) for the all-reduce of the
    first stage's fp32 gradients."""
    if case.plan.grad_bucket_bytes > 0:
        return case.plan.grad_bucket_bytes
    if case.plan.dp <= 1:
        return 25 * 2**20  # no data parallelism: unused
    span = GroupSpan(min(case.plan.dp, cluster.gpus_per_node), max(1, case.plan.dp // cluster.gpus_per_node))
    tables = model_tables(case.model, case.workload.seq_len, case.workload.activation_bytes,
                          case.workload.attention_impl)
    stage = case.plan.stages[0]
    total = 4.0 * (stage.num_layers * tables.layer.num_params + (tables.embedding.num_params if tables.embedding else 0))
    overhead_s = collective_time_s("all_reduce", 1.0, span, cluster)
    per_byte_s = (collective_time_s("all_reduce", total, span, cluster) - overhead_s) / total
    if per_byte_s <= 0:
        return total
    return max(2**16, math.sqrt(total * overhead_s / per_byte_s))


def _predict(case: PlanCase, cluster: ClusterSpec, runtime: Runtime) -> tuple[Estimate | None, str]:
    try:
        return evaluate_plan(case.model, case.workload, cluster, case.plan, runtime=runtime), ""
    except AutotuneError as err:
        return None, f"no prediction: {err}"


def _reference_losses(case: PlanCase, options: ValidateOptions, cache: dict) -> tuple[tuple[float, ...], str]:
    """Losses of one process training on the whole global batch at once (cached per model and batch)."""
    from autotune.validate.launch import launch

    key = (case.model, case.workload)
    if key not in cache:
        batch = case.workload.global_batch
        plan = uniform_plan(num_layers=case.model.num_layers, gpus=1, micro_batch=batch, global_batch=batch,
                            has_embeddings=case.model.has_embeddings)
        config = RunConfig(model=case.model, workload=case.workload, plan=plan, numerics_steps=options.numerics_steps,
                           warmup_steps=0, measured_steps=1, measure_memory=False, backend=options.backend)
        outcome = launch(config, timeout_s=options.timeout_s)
        losses = next((r.losses for r in outcome.ranks if r.losses), ())
        cache[key] = (losses, "" if outcome.status == "ok" else f"reference run {outcome.status}: {outcome.message}")
    return cache[key]


def _too_long(estimate: Estimate | None, options: ValidateOptions) -> str:
    """Why a case would surely outlive ``--timeout`` (its steps alone, as predicted), or ''."""
    if estimate is None:
        return ""
    steps = options.numerics_steps + 1 + options.warmup_steps + options.measured_steps  # +1: the memory step
    needed_s = steps * estimate.step_time_s
    if needed_s <= options.timeout_s:
        return ""
    return (f"not run: its {steps} steps are predicted to take {needed_s:,.0f} s here, beyond the "
            f"{options.timeout_s:g} s timeout; use --scale, a smaller --global-batch/--seq-len in the "
            "search, or a longer --timeout")


def run_case(case: PlanCase, options: ValidateOptions, cache: dict, fault: str = "none") -> PlanResult:
    """Predict, run and compare one case (never raises for a failed run)."""
    from autotune.validate.launch import launch
    from autotune.validate.train import check_runnable

    estimate, predict_note = _predict(case, options.cluster, options.runtime)
    config = RunConfig(model=case.model, workload=case.workload, plan=case.plan,
                       numerics_steps=options.numerics_steps, warmup_steps=options.warmup_steps,
                       measured_steps=options.measured_steps, bucket_bytes=ddp_bucket_bytes(case, options.cluster),
                       fault=fault, backend=options.backend)
    notes = case.notes + ((predict_note,) if predict_note else ())
    try:
        check_runnable(config)
    except AutotuneError as err:
        return PlanResult.not_run(case, estimate, status="unsupported", message=str(err), notes=notes)
    too_long = _too_long(estimate, options) if fault == "none" else ""
    if too_long:
        return PlanResult.not_run(case, estimate, status="too-long", message=too_long, notes=notes)
    outcome = launch(config, timeout_s=options.timeout_s)
    if outcome.status != "ok":
        return PlanResult.not_run(case, estimate, status=outcome.status, message=outcome.message, notes=notes)
    reference, ref_problem = _reference_losses(case, options, cache)
    return summarize_run(case, estimate, outcome, reference=reference, tolerance=loss_tolerance(case.workload.dtype),
                         notes=notes + ((ref_problem,) if ref_problem else ()))


def validate_cases(inputs: list[tuple[str, ModelSpec, TrainingWorkload, Plan]], options: ValidateOptions,
                   progress: Callable[[str], None] = lambda text: None, fault: str = "none",
                   on_result: Callable[[list[PlanResult]], None] = lambda results: None,
                   cache: dict | None = None) -> list[PlanResult]:
    """Prepare and run every (source, model, workload, plan) in turn; a plan that cannot run
    here, crashes or hangs gets its own result and the others still run. ``on_result`` sees
    the results so far after each plan (so an interrupted run keeps what finished). ``cache``:
    single-process reference losses kept from earlier calls (run_case's), by model and workload."""
    cache = {} if cache is None else cache
    results: list[PlanResult] = []
    for index, (source, model, workload, plan) in enumerate(inputs, 1):
        try:
            case = prepare_case(source, model, workload, plan, options)
        except AutotuneError as err:
            results.append(PlanResult(name=plan_label(plan), source=source, status="unsupported", message=str(err),
                                      world_size=plan.gpus, plan=plan.to_dict()))
            progress(f"[{index}/{len(inputs)}] {results[-1].name}: cannot run here: {err}")
        else:
            progress(f"[{index}/{len(inputs)}] {case.name}: running on {case.plan.gpus} processes")
            results.append(run_case(case, options, cache, fault))
            progress(f"[{index}/{len(inputs)}] {case.name}: {results[-1].status}")
        on_result(results)
    return results
