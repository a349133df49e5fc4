"""What one validation run executes: a plan on a model and workload, and how it is measured.

A :class:`RunConfig` is built in the parent process and handed to every worker (it pickles);
:class:`RankResult` is what a worker reports back as JSON. The synthetic data is a pure
function of (seed, step), so the single-process reference and every parallel layout train on
the same tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.errors import require, require_choice, require_positive
from autotune.plan.plan import Plan
from autotune.spec.model import ModelSpec
from autotune.spec.workload import TrainingWorkload

__all__ = ["RunConfig", "RankResult", "FAULTS", "LEARNING_RATE"]

# Faults a test can inject into rank 1 to check that crashes, hangs and broken gradient
# synchronisation are reported (never set by the CLI).
FAULTS = ("none", "crash", "hang", "skip_grad_sync")
# AdamW's learning rate for the numerics check: large enough that one step moves the loss by
# ~10% on the presets' random-token task, so a missing gradient reduction shows in the loss.
LEARNING_RATE = 1e-3


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A plan to execute on ``plan.gpus`` local worker processes.

    ``numerics_steps`` steps run with dropout off on fixed data and report their losses;
    then ``warmup_steps`` untimed and ``measured_steps`` timed steps (dropout as the spec
    says). ``bucket_bytes`` is DDP's gradient bucket; ``threads_per_rank`` torch threads each.
    """

    model: ModelSpec
    workload: TrainingWorkload
    plan: Plan
    numerics_steps: int = 3
    warmup_steps: int = 2
    measured_steps: int = 5
    seed: int = 0
    bucket_bytes: float = 25 * 2**20  # DDP's default bucket_cap_mb=25 when the plan names none
    threads_per_rank: int = 1
    backend: str = "gloo"
    measure_memory: bool = True
    fault: str = "none"

    def __post_init__(self) -> None:
        for name in ("numerics_steps", "measured_steps", "threads_per_rank"):
            require_positive(name, getattr(self, name))
        require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        require(self.bucket_bytes > 0, "bucket_bytes", "must be > 0")
        require_choice("backend", self.backend, ("gloo", "nccl"))
        require_choice("fault", self.fault, FAULTS)

    @property
    def world_size(self) -> int:
        return self.plan.gpus


@dataclass(frozen=True, kw_only=True)
class RankResult:
    """One rank's measurements; ``losses`` only on ranks that compute the loss."""

    rank: int
    losses: tuple[float, ...] = ()
    step_times_s: tuple[float, ...] = ()
    run_queue_s: tuple[float, ...] = ()  # per step: time the main thread waited for a CPU
    cpu_s: tuple[float, ...] = ()  # per step: CPU time of the process, all threads
    main_cpu_s: tuple[float, ...] = ()  # per step: CPU time of the main (compute) thread
    peak_tensor_bytes: float = 0.0
    peak_rss_delta_bytes: float = 0.0
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RankResult":
        return cls(rank=int(data["rank"]), losses=tuple(data.get("losses", ())),
                   step_times_s=tuple(data.get("step_times_s", ())), run_queue_s=tuple(data.get("run_queue_s", ())),
                   cpu_s=tuple(data.get("cpu_s", ())), main_cpu_s=tuple(data.get("main_cpu_s", ())),
                   peak_tensor_bytes=float(data.get("peak_tensor_bytes", 0.0)),
                   peak_rss_delta_bytes=float(data.get("peak_rss_delta_bytes", 0.0)),
                   error=str(data.get("error", "")), extra=dict(data.get("extra", {})))
