"""Estimate: what the cost model says of a plan. Frozen; its JSON keys are a stable interface."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["Estimate", "StageEstimate", "InferenceMetrics", "BREAKDOWN_KEYS", "MEMORY_KEYS"]

BREAKDOWN_KEYS = ("compute_s", "tp_cp_comm_s", "pp_comm_s", "pipeline_bubble_s", "dp_comm_s",
                  "optimizer_s", "offload_s", "ep_comm_s", "host_s")
MEMORY_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_states_bytes", "activations_bytes",
               "temporary_bytes", "allocator_bytes", "reserved_bytes", "offloaded_bytes")


def _floats(mapping: Mapping[str, Any]) -> MappingProxyType:
    return MappingProxyType({key: float(value) for key, value in mapping.items()})


def _plain(obj: Any, names: tuple[str, ...], kind: type) -> None:
    """numpy scalars from vectorised costs become Python numbers (clean repr, JSON, pickles)."""
    for name in names:
        object.__setattr__(obj, name, kind(getattr(obj, name)))


@dataclass(frozen=True, kw_only=True)
class StageEstimate:
    """One stage's share: per-micro-batch time parts, per-step tail, and its memory."""

    index: int
    layers: tuple[int, int]
    num_gpus: int
    microbatch_time_s: float
    time_s: Mapping[str, float]
    memory_bytes: Mapping[str, float]
    peak_memory_bytes: float
    inflight_microbatches: float
    fits: bool
    fwd_s: float = 0.0  # forward kernels of one micro-batch (the timeline's forward blocks)
    bwd_s: float = 0.0  # backward kernels, recomputation included

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_s", _floats(self.time_s))
        object.__setattr__(self, "memory_bytes", _floats(self.memory_bytes))
        _plain(self, ("microbatch_time_s", "peak_memory_bytes", "inflight_microbatches", "fwd_s", "bwd_s"), float)
        _plain(self, ("fits",), bool)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "layers": list(self.layers), "num_gpus": self.num_gpus,
                "microbatch_time_s": self.microbatch_time_s, "time_s": dict(self.time_s),
                "memory_bytes": dict(self.memory_bytes), "peak_memory_bytes": self.peak_memory_bytes,
                "inflight_microbatches": self.inflight_microbatches, "fits": self.fits,
                "fwd_s": self.fwd_s, "bwd_s": self.bwd_s}


@dataclass(frozen=True, kw_only=True)
class InferenceMetrics:
    """What an inference workload is judged by. ``tpot_s`` is None without a decode phase and
    ``ttft_s`` None without a prefill phase; ``time_per_token_s`` is 1 / ``tps`` (the seed
    experiment's "TPOT"); ``meets_targets`` says whether the workload's TPOT/TTFT targets hold."""

    tokens: float
    tps: float
    time_per_token_s: float
    kv_cache_bytes_per_gpu: float
    kv_cache_bytes: float
    decode_steps: int
    meets_targets: bool
    ttft_s: float | None = None
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        _plain(self, ("tokens", "tps", "time_per_token_s", "kv_cache_bytes_per_gpu", "kv_cache_bytes"), float)
        _plain(self, ("decode_steps",), int)
        _plain(self, ("meets_targets",), bool)
        for name in ("ttft_s", "tpot_s"):
            if getattr(self, name) is not None:
                _plain(self, (name,), float)

    def to_dict(self) -> dict[str, Any]:
        """The JSON keys of an inference estimate (``prefill_s`` kept beside ``ttft_s``)."""
        data = {name: getattr(self, name) for name in ("tps", "time_per_token_s", "tokens", "kv_cache_bytes_per_gpu",
                                                       "kv_cache_bytes", "decode_steps", "meets_targets")}
        if self.ttft_s is not None:
            data["ttft_s"] = data["prefill_s"] = self.ttft_s
        if self.tpot_s is not None:
            data["tpot_s"] = self.tpot_s
        return data


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Predicted step time, throughput and memory of a plan.

    ``breakdown`` (seconds) adds up to ``step_time_s``: the slowest stage's compute and exposed
    communication for all micro-batches, the pipeline bubble, and the step's tail (exposed
    data-parallel/ZeRO communication and the optimizer). ``memory_breakdown`` (bytes) is the
    stage with the highest peak. ``uncertainty_pct`` is a +-% band on ``step_time_s`` carried
    from the profile's fit residuals (or its check against published runs). ``memory_at_risk``:
    the plan fits, but its tensors' bytes within their prediction's uncertainty would not
    (cost/memory.py TENSOR_BYTES_UNCERTAINTY).
    """

    fits: bool
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    mfu: float
    peak_memory_bytes_per_gpu: float
    memory_capacity_bytes: float
    breakdown: Mapping[str, float]
    memory_breakdown: Mapping[str, float]
    uncertainty_pct: float
    model_flops_per_step: float
    stages: tuple[StageEstimate, ...] = ()
    reason: str = ""  # why it does not fit (empty when it fits)
    inference: InferenceMetrics | None = None  # inference workloads only
    memory_at_risk: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "breakdown", _floats(self.breakdown))
        object.__setattr__(self, "memory_breakdown", _floats(self.memory_breakdown))
        _plain(self, ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_memory_bytes_per_gpu",
                      "memory_capacity_bytes", "uncertainty_pct", "model_flops_per_step"), float)
        _plain(self, ("fits", "memory_at_risk"), bool)
        object.__setattr__(self, "stages", tuple(self.stages))

    def to_dict(self, *, stages: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "fits": self.fits, "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu,
            "peak_memory_bytes_per_gpu": self.peak_memory_bytes_per_gpu,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "breakdown": dict(self.breakdown), "memory_breakdown": dict(self.memory_breakdown),
            "uncertainty_pct": self.uncertainty_pct, "model_flops_per_step": self.model_flops_per_step,
            "reason": self.reason, "memory_at_risk": self.memory_at_risk,
            **(self.inference.to_dict() if self.inference else {}),
        }
        if stages:
            data["stages"] = [s.to_dict() for s in self.stages]
        return data
