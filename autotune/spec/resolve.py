"""Names to specs: a cluster by preset, file or spec (with a measured profile), and the
training or inference workload of a model with its preset's defaults. No I/O but reading the
data files a name points to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.spec.hardware import ClusterSpec
from autotune.spec.hardware_data import apply_profile, load_cluster, load_profile
from autotune.spec.model import ModelSpec
from autotune.spec.presets import default_training_shape
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

__all__ = ["resolve_cluster", "training_workload", "inference_workload", "DEFAULT_CLUSTER"]

# The cluster every entry point (library and CLI) assumes when none is given.
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
