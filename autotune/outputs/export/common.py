"""What every exporter shares: the plan with its model and workload, one setting for all stages,
and refusals that say why a framework cannot run a plan.

A refusal is an :class:`AutotuneError` (exit code 2 in the CLI) naming the plan field and the
reason. An exporter never drops a plan decision silently: a plan field it does not map must
hold its default value, or the export is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import MISSING, dataclass, fields
from typing import Any

from autotune.errors import AutotuneError
from autotune.plan.io import PlanFile
from autotune.plan.plan import Plan, StagePlan
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime, resolve_runtime
from autotune.spec.workload import TrainingWorkload, is_training

__all__ = ["ExportResult", "ExportContext", "export_context", "refuse", "check_mesh_order", "require_placements",
           "header_lines", "MAPPED_STAGE_FIELDS", "recompute_block_count", "recompute_frequency"]

# Fields every exporter maps: the pipeline split, the degrees and the batch.
CORE_PLAN_FIELDS = frozenset({"gpus", "micro_batch", "num_microbatches", "stages", "schedule", "vpp"})
CORE_STAGE_FIELDS = frozenset({"layers", "has_embedding", "has_head", "num_gpus", "tp", "cp", "dp"})
# Stage fields every exporter maps (or refuses values of) beyond the core ones.
MAPPED_STAGE_FIELDS = ("sequence_parallel", "recompute", "zero", "mesh_order", "weights_in", "optimizer_in",
                       "gradients_in", "activations_in")
# Fields that may differ between stages; every other stage field must be the same on all stages,
# since none of the three frameworks sets degrees, recomputation or sharding per stage.
PER_STAGE_FIELDS = frozenset({"layers", "has_embedding", "has_head", "recompute_layers"})


@dataclass(frozen=True, kw_only=True)
class ExportResult:
    """A framework config as text. ``notes`` are caveats; ``notes_in_text`` says whether the
    text already carries them as comments (JSON cannot)."""

    format: str
    text: str
    suffix: str
    notes: tuple[str, ...] = ()
    notes_in_text: bool = True


@dataclass(frozen=True, kw_only=True)
class ExportContext:
    """A plan checked against its model and workload; ``stage`` holds the settings all stages share."""

    framework: str
    plan: Plan
    model: ModelSpec
    workload: TrainingWorkload
    runtime: Runtime
    stage: StagePlan
    estimate: dict | None = None

    @property
    def layer_counts(self) -> tuple[int, ...]:
        """Transformer layers on each pipeline rank, first to last."""
        return tuple(s.num_layers for s in self.plan.stages)


def refuse(framework: str, field: str, reason: str) -> AutotuneError:
    return AutotuneError(field, f"{framework} cannot express this plan: {reason}")


def _check_mapped(framework: str, obj: Any, mapped: Iterable[str], prefix: str) -> None:
    """Refuse a field the exporter does not map unless it holds its default."""
    known = set(mapped)
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name not in known and (f.default is MISSING or value != f.default):
            raise refuse(framework, f"{prefix}{f.name}",
                         f"it has no setting for {f.name}={value!r} (default {f.default!r})")


def _check_uniform(framework: str, stages: tuple[StagePlan, ...]) -> None:
    for f in fields(StagePlan):
        if f.name in PER_STAGE_FIELDS:
            continue
        values = [getattr(s, f.name) for s in stages]
        if len(set(values)) > 1:
            raise refuse(framework, f"stages.{f.name}",
                         f"the stages differ in {f.name} ({values}); {framework} applies one "
                         f"{f.name} to every pipeline stage (stages on submeshes of one size and shape)")


def _recomputed(stage: StagePlan) -> int:
    """Layers of the stage that full recomputation covers (all of them when recompute_layers is 0)."""
    return stage.recompute_layers or stage.num_layers if stage.recompute == "full" else 0


def recompute_block_count(ctx: ExportContext) -> int:
    """Megatron-LM's --recompute-num-layers N with --recompute-method block: each pipeline rank
    recomputes its first min(N, layers) layers (per model chunk when interleaved). 0: the
    plan recomputes every layer (or none); refused when no one N gives every stage's count."""
    stages, vpp = ctx.plan.stages, ctx.plan.vpp
    if all(s.recompute_layers == 0 for s in stages):
        return 0
    n = max(s.recompute_layers for s in stages)
    if n % vpp == 0 and all(_recomputed(s) == min(n, s.num_layers) for s in stages):
        return n // vpp
    raise refuse(ctx.framework, "stages.recompute_layers",
                 f"it recomputes the first N layers of every stage (of every model chunk) with one N; the stages "
                 f"recompute {[_recomputed(s) for s in stages]} of {list(ctx.layer_counts)} layers (vpp {vpp})")


def recompute_frequency(ctx: ExportContext) -> int:
    """torchtitan's selective AC frequency f (activation_checkpoint.selective_ac_option = f): every
    f-th transformer block of a rank is fully checkpointed, floor(layers / f) of them; 0 when
    the plan recomputes every layer (or none); refused when no f gives every stage's count."""
    stages = ctx.plan.stages
    if all(s.recompute_layers == 0 for s in stages):
        return 0
    for f in range(2, max(ctx.layer_counts) + 1):
        if all(s.num_layers // f == _recomputed(s) for s in stages):
            return f
    raise refuse(ctx.framework, "stages.recompute_layers",
                 f"its selective AC checkpoints every f-th block (floor(layers / f) per rank); no f gives the "
                 f"stages' counts {[_recomputed(s) for s in stages]} of {list(ctx.layer_counts)} layers")


def export_context(plan_file: PlanFile, framework: str, *, plan_fields: Iterable[str],
                   stage_fields: Iterable[str] = MAPPED_STAGE_FIELDS) -> ExportContext:
    """Check ``plan_file`` for export; ``plan_fields``/``stage_fields`` are the ones the exporter maps
    beyond the core ones."""
    if plan_file.model is None or plan_file.workload is None:
        raise AutotuneError("plan", f"exporting to {framework} needs a plan file with its model and workload "
                                    "(a run's plan.json); this one holds a bare plan")
    workload = plan_file.workload
    if not is_training(workload):
        raise refuse(framework, "workload.kind", f"the exports are training configs, the plan is for {workload.kind!r}")
    plan, model = plan_file.plan, plan_file.model
    plan.check_against(model.num_layers, workload.global_batch, model.has_embeddings)
    _check_mapped(framework, plan, CORE_PLAN_FIELDS | set(plan_fields), "")
    _check_uniform(framework, plan.stages)
    for stage in plan.stages:
        _check_mapped(framework, stage, CORE_STAGE_FIELDS | set(stage_fields), "stages.")
    runtime = resolve_runtime(plan_file.runtime)
    return ExportContext(framework=framework, plan=plan, model=model, workload=workload, runtime=runtime, stage=plan.stages[0],
                         estimate=plan_file.estimate)


def check_mesh_order(ctx: ExportContext, framework_order: str = "tp-cp-dp") -> None:
    """The framework places ranks in ``framework_order`` (innermost first); only the groups with
    more than one rank matter."""
    s = ctx.stage
    degree = {"tp": s.tp, "cp": s.cp, "dp": s.dp}
    used = [g for g in s.mesh_order.split("-") if degree[g] > 1]
    expected = [g for g in framework_order.split("-") if degree[g] > 1]
    if used != expected:
        raise refuse(ctx.framework, "stages.mesh_order",
                     f"it places ranks {framework_order} (innermost first) and has no option for the plan's "
                     f"{s.mesh_order} with tp={s.tp}, cp={s.cp}, dp={s.dp}")


def require_placements(ctx: ExportContext, allowed: dict[str, tuple[str, ...]], why: str) -> None:
    """Each placement field must be one of ``allowed[field]`` (fields absent: HBM only)."""
    for name in ("weights_in", "optimizer_in", "gradients_in", "activations_in"):
        value = getattr(ctx.stage, name, "hbm")
        ok = allowed.get(name, ("hbm",))
        if value not in ok:
            raise refuse(ctx.framework, f"stages.{name}",
                         f"{name}={value!r} is not available ({name} may be {', '.join(ok)}); {why}")


def header_lines(ctx: ExportContext, target: str) -> list[str]:
    """Comment lines (without the comment marker) saying what the file is for."""
    p, s, w = ctx.plan, ctx.stage, ctx.workload
    lines = [
        f"autotune plan for {ctx.model.name}: {p.gpus} GPUs = tp {s.tp} x cp {s.cp} x pp {p.pp} x dp {s.dp}; "
        f"global batch {p.global_batch} x {w.seq_len} tokens, {w.dtype}",
        f"target: {target}",
    ]
    if ctx.estimate and ctx.estimate.get("tokens_per_s"):
        e = ctx.estimate
        lines.append(f"predicted: {e['tokens_per_s']:,.0f} tokens/s, step {e.get('step_time_s', 0.0):.3f} s, "
                     f"peak {e.get('peak_memory_bytes_per_gpu', 0.0) / 2**30:.1f} GiB per GPU")
    return lines
