"""A saved plan scored again: a run directory's or plan file's plan, with its own model,
workload, cluster and profile, through the current cost model."""

from __future__ import annotations

from pathlib import Path

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import require
from autotune.plan.io import PlanFile, read_plan_file

__all__ = ["rescore"]


def rescore(target: str | Path) -> tuple[PlanFile, Estimate]:
    """(plan file, estimate) of a run directory or plan file, scored now."""
    from autotune.spec.resolve import resolve_cluster
    from autotune.spec.runtime import resolve_runtime
    from autotune.spec.hardware_data import cluster_from_dict

    plan_file = read_plan_file(target)
    require(plan_file.model is not None and plan_file.workload is not None, "plan",
            "this plan file has no model/workload; use autotune evaluate --plan with --model")
    ref = plan_file.cluster
    cluster = cluster_from_dict(ref["name"], ref["data"]) if isinstance(ref, dict) else ref
    cluster_spec = resolve_cluster(cluster, plan_file.profile)
    return plan_file, evaluate_plan(plan_file.model, plan_file.workload, cluster_spec, plan_file.plan,
                                    runtime=resolve_runtime(plan_file.runtime))
