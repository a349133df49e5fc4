"""Scaling curves as text: one row per GPU count, the knee, and a one-line plan summary."""

from __future__ import annotations

from typing import Any

from autotune.plan.plan import Plan

__all__ = ["plan_summary", "curve_table"]


def _stage_shape(stage: Any) -> str:
    parts = [f"tp{stage.tp}"] + ([f"cp{stage.cp}"] if stage.cp > 1 else []) + [f"dp{stage.dp}"]
    parts += [f"ep{stage.ep}" + (f" etp{stage.etp}" if stage.etp > 1 else "")] if stage.ep > 1 or stage.etp > 1 else []
    parts += [f"zero{stage.zero}"] if stage.zero else []
    count = f":{stage.recompute_layers}" if stage.recompute_layers else ""
    parts += [f"recompute-{stage.recompute}{count}"] if stage.recompute != "none" else []
    placed = [name[:-3] for name in ("weights_in", "optimizer_in", "activations_in", "gradients_in")
              if getattr(stage, name) != "hbm"]
    parts += [f"{'+'.join(placed)}-offload"] if placed else []
    return " ".join(parts)


def plan_summary(plan: Plan) -> str:
    """``pp4 v2 | tp2 dp8 zero1 | mb1 x 16``: stages (and virtual stages), the distinct stage
    shapes, micro-batch size x micro-batches."""
    shapes: list[str] = []
    for stage in plan.stages:
        if (shape := _stage_shape(stage)) not in shapes:
            shapes.append(shape)
    head = f"pp{plan.pp}" + (f" v{plan.vpp}" if plan.vpp > 1 else "")
    return f"{head} | {' / '.join(shapes)} | mb{plan.micro_batch} x {plan.num_microbatches}"


def _time(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def curve_table(curve: Any) -> list[str]:
    """The rows of a ScalingCurve (autotune.search.curve) and a last line naming the knee."""
    lines = [f"{'gpus':>6} {'tokens/s':>12} {'eff.':>6} {'step time':>10} {'MFU':>6} {'mem/GPU':>9}  plan"]
    for point in curve.points:
        e = point.estimate
        if e is None:
            lines.append(f"{point.gpus:>6} {'-':>12} {'-':>6} {'-':>10} {'-':>6} {'-':>9}  nothing fits: {point.note}")
            continue
        lines.append(f"{point.gpus:>6} {e.tokens_per_s:>12,.0f} {100 * point.efficiency:>5.1f}% {_time(e.step_time_s):>10} "
                     f"{100 * e.mfu:>5.1f}% {e.peak_memory_bytes_per_gpu / 2**30:>5.1f} GiB  {plan_summary(point.plan)}")
    threshold = f"{100 * curve.efficiency_threshold:.0f}%"
    plural = "" if curve.knee_gpus == 1 else "s"
    lines.append(f"knee: {curve.knee_gpus} GPU{plural} (the most GPUs still at >= {threshold} scaling efficiency)"
                 if curve.knee_gpus is not None else f"knee: none (no count fits at >= {threshold} efficiency)")
    return lines
