"""A collective's time as measured over a sweep of message sizes on one group of GPUs, interpolated in bytes.

Read by cost/serving_nccl.py (NCCL's collectives: data/nccl_all_reduce.toml, nccl_collectives.toml) and
cost/serving_custom_ar.py (the engines' own all-reduce kernels: data/engine_all_reduce.toml); each table cites
its source. Between two measured sizes the time is a straight line in bytes (locally latency + bytes / bandwidth);
below the smallest size, that size's time (the latency floor); past the largest, the largest's time, so callers
that need the range ask :meth:`SizeSweep.covers` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.errors import require

__all__ = ["SizeSweep", "sweep_fields"]


@dataclass(frozen=True, kw_only=True, eq=False)
class SizeSweep:
    """One measured sweep: ``seconds[i]`` for a collective of ``nbytes[i]`` bytes over ``gpus`` GPUs."""

    label: str  # the data table it was read from, named in errors ("engine_all_reduce", "nccl.all_gather")
    gpus: int
    nbytes: tuple[float, ...]
    seconds: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        where = f"{self.label}.gpus.{self.gpus}"
        require(len(self.nbytes) >= 2 and len(self.nbytes) == len(self.seconds), where,
                "needs at least two sizes and one time per size")
        require(all(b > a for a, b in zip(self.nbytes, self.nbytes[1:])), f"{where}.bytes", "must increase")
        require(all(np.isfinite(t) and t > 0 for t in self.seconds), f"{where}.seconds", "must be positive seconds")

    def covers(self, nbytes: np.ndarray) -> np.ndarray:
        """Where ``nbytes`` lies within the measured sizes."""
        return (nbytes >= self.nbytes[0]) & (nbytes <= self.nbytes[-1])

    def time_s(self, nbytes: np.ndarray) -> np.ndarray:
        """Interpolated in bytes; the end sizes' times outside the measured range."""
        return np.interp(nbytes, self.nbytes, self.seconds)


def sweep_fields(gpus: str, sweep: dict[str, Any]) -> dict[str, Any]:
    """A TOML sweep (``[...gpus.N]`` with ``bytes`` and ``seconds`` lists) as SizeSweep's gpus, nbytes and seconds."""
    return {"gpus": int(gpus), "nbytes": tuple(float(b) for b in sweep["bytes"]),
            "seconds": tuple(float(t) for t in sweep["seconds"])}
