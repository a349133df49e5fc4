"""Time the reference transformer (autotune.validate.model) the way seed 002's benchmarking
problem does: 5 warm-up steps, then the mean and standard deviation of 10 measured steps of
the forward pass and of forward + backward, synchronised before each clock read; plus the
peak tensor memory of one forward + backward step (CUDA: the allocator's peak; CPU: the
profiler's allocation events, since a CPU process has no ``max_memory_allocated``).
Mixed precision runs under ``torch.autocast`` with fp32 weights, as the seed does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from autotune.spec.model import ModelSpec
from profilers.timing import Timing, resolve_device, synchronize, time_call

__all__ = ["BenchmarkResult", "benchmark_model", "cpu_peak_allocated_bytes"]

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, kw_only=True)
class BenchmarkResult:
    forward: Timing
    forward_backward: Timing | None
    peak_memory_bytes: float  # live tensors at the peak of one forward + backward step
    persistent_bytes: float  # parameters, buffers and the input batch


def _tensor_bytes(tensors) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))


def cpu_peak_allocated_bytes(step: Callable[[], object]) -> float:
    """Most bytes that ``step`` had allocated and not yet freed at any moment, from the CPU
    allocator's events (the profiler with ``profile_memory``); results ``step`` returns are
    dropped inside the window, so they count until then."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = step()
        del result
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0.0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def _peak_step_bytes(step: Callable[[], object], device: torch.device, persistent: float) -> float:
    """Peak live tensor bytes while ``step`` runs (persistent tensors included)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        return float(torch.cuda.max_memory_allocated(device))
    return persistent + cpu_peak_allocated_bytes(step)


def benchmark_model(spec: ModelSpec, *, batch: int, seq_len: int, dtype: str = "fp32", backward: bool = True,
                    device: str = "cpu", warmup: int = 5, steps: int = 10, threads: int = 1,
                    clock: str = "wall") -> BenchmarkResult:
    """Forward and forward+backward timings of ``spec``'s reference model on random tokens."""
    from autotune.validate.model import build_model

    dev = resolve_device(device)
    torch.set_num_threads(threads)
    model = build_model(spec, device=dev)
    shape = (batch, seq_len) if spec.has_embeddings else (batch, seq_len, spec.hidden_size)
    inputs = (torch.randint(0, spec.vocab_size, shape, device=dev) if spec.has_embeddings
              else torch.randn(shape, device=dev))
    autocast = (torch.autocast(dev.type, dtype=_AUTOCAST[dtype]) if dtype in _AUTOCAST
                else contextlib.nullcontext())

    def forward() -> torch.Tensor:
        with autocast:
            return model(inputs)

    targets = torch.randint(0, max(spec.vocab_size, 1), shape[:2], device=dev)

    def loss() -> torch.Tensor:  # cross entropy over the vocabulary, as the cost model's head counts
        out = forward().float()
        if not spec.has_embeddings:
            return out.mean()
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), targets.flatten())

    def forward_backward() -> None:
        model.zero_grad(set_to_none=True)
        loss().backward()

    fwd = time_call(forward, device=dev, warmup=warmup, repeats=steps, clock=clock)
    both = time_call(forward_backward, device=dev, warmup=warmup, repeats=steps, clock=clock) if backward else None
    persistent = _tensor_bytes(list(model.parameters()) + list(model.buffers()) + [inputs])
    model.zero_grad(set_to_none=True)
    peak = _peak_step_bytes(forward_backward, dev, persistent)
    return BenchmarkResult(forward=fwd, forward_backward=both, peak_memory_bytes=peak, persistent_bytes=persistent)
