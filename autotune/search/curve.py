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
from autotune.spec import arguments as A
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


def _search_keywords() -> set[str]:
    """What ``**search_kwargs`` may carry: autotune.search's keywords but those the curve sets."""
    import inspect

    from autotune.search.api import search

    from autotune.search.many import _PER_RUN

    return set(inspect.signature(search.__wrapped__).parameters) - {"model", "gpus", *_PER_RUN}




@A.entry_point({"model": A.model_arg}, extra=_search_keywords)
def scaling_curve(model: Any, gpus: Sequence[int], *, efficiency_threshold: float = 0.8, **search_kwargs: Any) -> ScalingCurve:
    """Search every GPU count (``search_kwargs`` go to autotune.search: cluster, workload,
    space, seed...) as one batch (autotune.search_many: stage tables shared by the counts; no
    baselines unless ``baselines=True``). Counts where nothing fits get a point with a note."""
    require(isinstance(gpus, Sequence) and not isinstance(gpus, str), "gpus",
            f"must be a list of GPU counts, e.g. [1, 2, 4, 8], got {gpus!r}")
    require(bool(gpus) and all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in gpus), "gpus",
            f"GPU counts must be positive integers, got {list(gpus)}")
    require(isinstance(efficiency_threshold, (int, float)) and 0.0 < efficiency_threshold <= 1.0,
            "efficiency_threshold", f"must be a number in (0, 1], got {efficiency_threshold!r}")
    from autotune.search.api import SEARCH_CHECKS

    for key, value in search_kwargs.items():
        SEARCH_CHECKS[key](key, value)
    counts = sorted(set(gpus))
    from autotune.spec.resolve import DEFAULT_CLUSTER, resolve_cluster
    from autotune.spec.presets import resolve_model

    spec = resolve_model(model)
    cluster = resolve_cluster(search_kwargs.get("cluster", DEFAULT_CLUSTER))
    for count in counts:
        cluster.check_gpus(count)  # a count the cluster cannot form is bad input, before any work
    from autotune.search.many import search_many

    answers = search_many([{"gpus": count} for count in counts], model=spec,
                          **{"baselines": False, **search_kwargs})
    results = [(a.query["gpus"], a.result.plan if a.result else None, a.result.estimate if a.result else None, a.note)
               for a in answers]
    fitting = [(c, e) for c, _, e, _ in results if e is not None]
    base = fitting[0][1].tokens_per_s / fitting[0][0] if fitting else 0.0
    points = tuple(CurvePoint(gpus=c, plan=p, estimate=e, efficiency=(e.tokens_per_s / c / base) if e and base else 0.0,
                              note=note) for c, p, e, note in results)
    good = [p.gpus for p in points if p.estimate is not None and p.efficiency >= efficiency_threshold]
    return ScalingCurve(model=spec.name, points=points, knee_gpus=max(good) if good else None,
                        efficiency_threshold=efficiency_threshold)
