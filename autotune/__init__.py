"""autotune: an auto-parallel planner for transformer training and inference.

The public API (imported lazily, so ``import autotune`` stays fast and never loads torch)::

    autotune.evaluate(model, gpus, cluster=..., tp=..., pp=...)     -> Estimate
    autotune.search(model=..., gpus=..., cluster=..., runtime=..., seed=...) -> SearchResult
    autotune.resume(run_dir)                                        -> SearchResult
    autotune.scaling_curve(model, gpus=[1, 2, 4, ...], ...)         -> ScalingCurve
    autotune.search_many([{"model": ..., "gpus": ...}, ...], ...)   -> tuple[SearchAnswer, ...]
"""

from __future__ import annotations

import importlib
from typing import Any

# The subpackage autotune.search shares its name with the function below. Importing it first
# means no later import of one of its modules rebinds ``autotune.search`` to the package.
import autotune.search as _search_package  # noqa: F401  (cheap: its __init__ imports nothing)

__all__ = [
    "evaluate", "search", "resume", "scaling_curve", "search_many", "SearchAnswer", "AutotuneError", "ModelSpec", "TrainingWorkload",
    "Plan", "StagePlan", "Estimate", "SearchResult", "load_preset", "load_cluster", "preset_names", "cluster_names",
    "Runtime", "load_runtime", "runtime_names",
]

_WHERE = {
    "evaluate": "autotune.search.evaluate", "resume": "autotune.search.api",
    "scaling_curve": "autotune.search.curve", "search_many": "autotune.search.many",
    "SearchAnswer": "autotune.search.many", "AutotuneError": "autotune.errors", "ModelSpec": "autotune.spec.model",
    "TrainingWorkload": "autotune.spec.workload", "Plan": "autotune.plan.plan", "StagePlan": "autotune.plan.plan",
    "Estimate": "autotune.cost.estimate", "SearchResult": "autotune.search.result",
    "load_preset": "autotune.spec.presets", "preset_names": "autotune.spec.presets",
    "load_cluster": "autotune.spec.hardware_data", "cluster_names": "autotune.spec.hardware_data",
    "Runtime": "autotune.spec.runtime", "load_runtime": "autotune.spec.runtime", "runtime_names": "autotune.spec.runtime",
}


def search(*args: Any, **kwargs: Any) -> Any:
    """The fastest plan that fits (see autotune.search.api.search for the arguments)."""
    from autotune.search.api import search as run

    return run(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
