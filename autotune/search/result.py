"""What a search returns: the best plan, its estimate, baselines, and how the search went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.spec.runtime import Runtime
from autotune.cost.estimate import Estimate
from autotune.plan.plan import Plan

__all__ = ["Baseline", "SearchStats", "SearchResult"]


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """A hand-made plan scored by the same cost model."""

    name: str
    description: str
    plan: Plan | None
    estimate: Estimate | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "note": self.note,
                "plan": self.plan.to_dict() if self.plan else None,
                "estimate": self.estimate.to_dict(stages=False) if self.estimate else None}


@dataclass(frozen=True, kw_only=True)
class SearchStats:
    method: str
    wall_time_s: float
    num_slices: int
    num_slices_solved: int
    num_slices_pruned: int
    num_slices_resumed: int
    num_intra_op_studies: int
    num_trials: int  # stage tables priced (uniform spaces) or intra-op trials (others)
    best_from: str = "search"  # or "baseline NAME" when a baseline outside the space was faster


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    plan: Plan
    estimate: Estimate
    baselines: tuple[Baseline, ...]
    stats: SearchStats
    # each slice's best plan (Pareto plots), of the slices that could beat the best plan found before them
    # (the others are pruned: by their floors, or by their stage DP)
    candidates: tuple[tuple[Plan, Estimate], ...] = ()
    run_dir: str | None = None
    extra: dict = field(default_factory=dict)
    runtime: Runtime | None = None  # what runs the plan (None only for standalone scenarios)

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime.to_dict() if self.runtime else None,
                "plan": self.plan.to_dict(), "estimate": self.estimate.to_dict(),
                "baselines": [b.to_dict() for b in self.baselines], "run_dir": self.run_dir,
                "stats": vars(self.stats)}
