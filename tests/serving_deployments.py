"""A serving deployment of a preset model on a preset cluster, and the batch limits its engine takes
under maximum load: shared by the engine-version tests."""

from __future__ import annotations

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_limits import EngineLimits
from autotune.cost.serving_load import Load
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def deployment(runtime: str, *, model: str = "llama3-8b", cluster: str = "dgx-h100", tp: int = 1,
               dtype: str = "bf16") -> ServingDeployment:
    return ServingDeployment(model=resolve_model(model), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                             tp=tp, weight_dtype=dtype)


def max_throughput_limits(dep: ServingDeployment, input_len: int, output_len: int) -> EngineLimits:
    """The EngineLimits the engine runs ``dep`` with when every request is queued at once."""
    return run_serving(dep, Load(kind="max_throughput", num_requests=2, input_len=input_len,
                                 output_len=output_len)).limits
