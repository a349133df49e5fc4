"""The one typed context costing reads: a training stage's (StageContext) or an inference phase's
(InferenceContext). Both carry the model's tables, the workload (what the step is), the runtime
(how it is run) and the cluster; code shared by training and inference takes a CostContext."""

from __future__ import annotations

from autotune.cost.inference import InferenceContext
from autotune.cost.stage import StageContext

__all__ = ["CostContext"]

CostContext = StageContext | InferenceContext
