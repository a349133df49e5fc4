"""The library entry points: resolve names to specs, build plans, score them. No I/O but
reading the data files a name points to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.cost.inference_plan import require_targets
from autotune.errors import require
from autotune.plan.builders import uniform_plan
from autotune.plan.plan import Plan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.hardware_data import apply_profile, load_cluster, load_profile
from autotune.spec.model import ModelSpec
from autotune.spec.presets import default_training_shape, resolve_model
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

__all__ = ["evaluate", "resolve_cluster", "training_workload", "inference_workload", "DEFAULT_CLUSTER"]

DEFAULT_CLUSTER = "dgx-h100"


def resolve_cluster(cluster: str | Path | ClusterSpec = DEFAULT_CLUSTER,
                    profile: str | Path | dict[str, Any] | None = None) -> ClusterSpec:
    """A cluster by preset name, file or spec, with a measured profile applied if given."""
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    if profile is not None:
        data = profile if isinstance(profile, dict) else load_profile(profile)
        spec = apply_profile(spec, data)
    return spec


def training_workload(model: ModelSpec, *, global_batch: int | None = None, seq_len: int | None = None,
                      dtype: str = "bf16", attention: str = "flash") -> TrainingWorkload:
    """A training step with the preset's defaults for what is not given."""
    default_batch, default_seq = default_training_shape(model)
    return TrainingWorkload(global_batch=global_batch or default_batch, seq_len=seq_len or default_seq,
                            dtype=dtype, attention_impl=attention)


def inference_workload(model: ModelSpec, kind: str, *, batch: int | None = None, prompt_len: int | None = None,
                       output_len: int = 0, dtype: str = "bf16", attention: str = "flash",
                       target_tpot_s: float = 0.0, target_ttft_s: float = 0.0) -> InferenceWorkload:
    """A prefill, decode or serve workload; batch and prompt default to the preset's training shape."""
    default_batch, default_seq = default_training_shape(model)
    return InferenceWorkload(kind=kind, batch=batch or default_batch, prompt_len=prompt_len or default_seq,
                             output_len=output_len, dtype=dtype, attention_impl=attention,
                             target_tpot_s=target_tpot_s, target_ttft_s=target_ttft_s)


def evaluate(model: str | ModelSpec, gpus: int | None = None, *, cluster: str | ClusterSpec = DEFAULT_CLUSTER,
             plan: Plan | None = None, workload: TrainingWorkload | InferenceWorkload | None = None, profile: Any = None,
             tp: int = 1, pp: int = 1, dp: int | None = None, cp: int = 1, vpp: int = 1, micro_batch: int = 1,
             global_batch: int | None = None, seq_len: int | None = None, recompute: str = "none",
             sequence_parallel: bool | None = None, zero: int = 0, dtype: str = "bf16",
             attention: str = "flash", **plan_options: Any) -> Estimate:
    """Predict step time and memory of a plan (given, or built Megatron-style from degrees).

    ``sequence_parallel=None`` turns it on whenever ``tp > 1`` in training (inference runs TP
    with all-reduces). ``plan_options`` go to the plan (``overlap_grad_reduce``,
    ``overlap_tp_comm``, ``mesh_order``, ``kv_cache_in``, ``cache_group_layers``...). An
    inference workload that misses its serving target raises an AutotuneError saying what
    the plan and the best uniform plan on these GPUs reach.
    """
    spec = resolve_model(model)
    cluster_spec = resolve_cluster(cluster, profile)
    work = workload or training_workload(spec, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                                         attention=attention)
    if plan is None:
        require(gpus is not None, "gpus", "give the GPU count (or a plan)")
        cluster_spec.check_gpus(gpus)
        plan = uniform_plan(num_layers=spec.num_layers, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp,
                            micro_batch=micro_batch, global_batch=work.global_batch,
                            sequence_parallel=(tp > 1 and work.kind == "train") if sequence_parallel is None else sequence_parallel,
                            recompute=recompute, zero=zero, has_embeddings=spec.has_embeddings, **plan_options)
    estimate = evaluate_plan(spec, work, cluster_spec, plan)
    if work.kind != "train" and not estimate.extra.get("meets_targets", 1.0):
        from autotune.scenarios.serving import best_plan_note  # enumerates plans: only when needed
        require_targets(estimate, work, best_plan_note(spec, work, cluster_spec, plan.gpus))
    return estimate
