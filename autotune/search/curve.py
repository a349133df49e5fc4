"""Scaling curves: the best plan and throughput at each GPU count, before allocating GPUs.

Strong scaling at a fixed global batch. Scaling efficiency of n GPUs is its per-GPU throughput
over that of the smallest count that fits; the knee is the largest count whose efficiency is
still at least ``efficiency_threshold`` (past it, more GPUs buy little).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.cost.estimate import Estimate
from autotune.errors import AutotuneError, require
from autotune.plan.plan import Plan

__all__ = ["CurvePoint", "ScalingCurve", "scaling_curve", "parse_gpu_list"]


@dataclass(frozen=True, kw_only=True)
class CurvePoint:
    gpus: int
    plan: Plan | None
    estimate: Estimate | None
    efficiency: float  # per-GPU throughput relative to the smallest count that fits (0 if it does not fit)
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.estimate.tokens_per_s if self.estimate else 0.0

    def to_dict(self) -> dict[str, Any]:
        e = self.estimate
        return {"gpus": self.gpus, "tokens_per_s": self.tokens_per_s, "efficiency": self.efficiency,
                "step_time_s": e.step_time_s if e else None, "mfu": e.mfu if e else None,
                "peak_memory_bytes_per_gpu": e.peak_memory_bytes_per_gpu if e else None,
                "plan": self.plan.to_dict() if self.plan else None, "note": self.note}


@dataclass(frozen=True, kw_only=True)
class ScalingCurve:
    model: str
    points: tuple[CurvePoint, ...]
    knee_gpus: int | None
    efficiency_threshold: float

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "knee_gpus": self.knee_gpus, "efficiency_threshold": self.efficiency_threshold,
                "points": [p.to_dict() for p in self.points]}


def parse_gpu_list(text: str) -> list[int]:
    """"1,2,4,8" -> [1, 2, 4, 8]; zero, negative or non-numeric counts are refused."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise AutotuneError("gpus", f"{text!r} is not a comma-separated list of GPU counts, e.g. 1,2,4,8") from None
    require(bool(counts), "gpus", "give at least one GPU count, e.g. 1,2,4,8")
    bad = [c for c in counts if c <= 0]
    require(not bad, "gpus", f"GPU counts must be positive, got {bad}")
    return sorted(set(counts))


def _point(gpus: int, search_kwargs: dict) -> tuple[Plan | None, Estimate | None, str]:
    from autotune.search.api import search

    try:
        result = search(gpus=gpus, **search_kwargs)
        return result.plan, result.estimate, ""
    except AutotuneError as err:
        if err.field != "gpus":
            raise
        return None, None, err.message


def scaling_curve(model: Any, gpus: Sequence[int], *, efficiency_threshold: float = 0.8, **search_kwargs: Any) -> ScalingCurve:
    """Search every GPU count (``search_kwargs`` go to autotune.search: cluster, workload,
    space, seed...). Counts where nothing fits get a point with a note, not an error."""
    counts = sorted(set(gpus))
    require(bool(counts) and all(isinstance(c, int) and c > 0 for c in counts), "gpus",
            f"GPU counts must be positive integers, got {list(gpus)}")
    from autotune.spec.resolve import DEFAULT_CLUSTER, resolve_cluster
    from autotune.spec.presets import resolve_model

    spec = resolve_model(model)
    cluster = resolve_cluster(search_kwargs.get("cluster", DEFAULT_CLUSTER))
    for count in counts:
        cluster.check_gpus(count)  # a count the cluster cannot form is bad input, before any work
    results = [(count, *_point(count, {**search_kwargs, "model": spec})) for count in counts]
    fitting = [(c, e) for c, _, e, _ in results if e is not None]
    base = fitting[0][1].tokens_per_s / fitting[0][0] if fitting else 0.0
    points = tuple(CurvePoint(gpus=c, plan=p, estimate=e, efficiency=(e.tokens_per_s / c / base) if e and base else 0.0,
                              note=note) for c, p, e, note in results)
    good = [p.gpus for p in points if p.estimate is not None and p.efficiency >= efficiency_threshold]
    return ScalingCurve(model=spec.name, points=points, knee_gpus=max(good) if good else None,
                        efficiency_threshold=efficiency_threshold)
