"""Timing the way seed 002 benchmarks: warm-up steps, then repeated measured steps, each
bracketed by a device synchronisation so the clock reads finished work; mean and standard
deviation over the measured steps."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Timing", "synchronize", "time_call", "resolve_device", "CLOCKS"]


@dataclass(frozen=True, kw_only=True)
class Timing:
    mean_s: float
    std_s: float
    samples_s: tuple[float, ...]

    @property
    def num_repeats(self) -> int:
        return len(self.samples_s)


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N``; raises ValueError naming what is available."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("no CUDA device is available here (torch.cuda.is_available() is False); use cpu")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device type {device.type!r}; use cpu or cuda")
    return device


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels: CUDA launches are asynchronous, CPU ops are not."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Clocks: "wall" reads time.perf_counter; "cpu" reads the calling thread's CPU time, which on
# a shared machine leaves out the time slices other processes take. With one torch thread all
# of an op's work runs on the calling thread, so its CPU time is the op's wall time on a core
# of its own; with more threads (or CUDA) only the wall clock is meaningful.
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def time_call(fn: Callable[[], object], *, device: torch.device, warmup: int, repeats: int,
              min_time_s: float = 0.0, clock: str = "wall") -> Timing:
    """Time ``fn``: ``warmup`` unmeasured calls, then ``repeats`` measured ones.

    A call shorter than the clock can resolve well is repeated inside one measured step
    until the step lasts ``min_time_s``; the step's time is divided by its call count.
    """
    now = CLOCKS[clock]
    for _ in range(warmup):
        fn()
    synchronize(device)
    inner = _calls_per_step(fn, device, min_time_s, now) if min_time_s > 0 else 1
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = now()
        for _ in range(inner):
            fn()
        synchronize(device)
        samples.append((now() - start) / inner)
    std = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return Timing(mean_s=statistics.fmean(samples), std_s=std, samples_s=tuple(samples))


def _calls_per_step(fn: Callable[[], object], device: torch.device, min_time_s: float,
                    now: Callable[[], float]) -> int:
    synchronize(device)
    start = now()
    fn()
    synchronize(device)
    once = max(now() - start, 1e-7)
    return max(1, min(1000, int(min_time_s / once)))
