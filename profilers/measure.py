"""Run the micro-benchmarks of ``autotune profile`` on this machine and collect what they
measured (:class:`autotune.calibrate.profile_io.ProfileData`); the fits happen there.

Kernels are timed in this process with ``threads`` torch threads, the setting each worker of
a CPU run uses (one process per worker); collectives run between ``world_size`` spawned
processes. Sizes: ``quick`` is a short sweep (about a minute on two cores), the full one
covers more shapes with seed 002's 5 warm-up and 10 measured steps.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from autotune.calibrate.profile_io import HostInfo, ProfileData
from autotune.errors import require
from profilers.collectives import CollectiveConfig, run_collectives
from profilers.kernels import (FP8_SCALINGS, SweepConfig, SweepResult, attention_sweep, bmm_sweep, gemm_sweep,
                               memory_sweep)
from profilers.timing import resolve_device

__all__ = ["ProfileOptions", "measure_profile", "host_info", "sweep_config", "sweep_steps", "collective_configs"]


@dataclass(frozen=True, kw_only=True)
class ProfileOptions:
    device: str = "cpu"
    quick: bool = False
    threads: int = 1
    dtypes: tuple[str, ...] | None = None  # default: fp32, bf16 on CPU; bf16, fp16, fp32 (+ fp8) on GPUs
    world_sizes: tuple[int, ...] | None = None  # collective group sizes; () skips collectives
    workers_per_node: int = 4  # CPU: the machine's memory is shared by this many workers
    aliases: tuple[str, ...] = ()
    clock: str = "auto"  # kernels: "wall", "cpu", or "auto" (thread CPU time on one CPU thread)

    def kernel_clock(self, device: torch.device) -> str:
        """The clock kernels are timed by; the cpu clock times one CPU thread only."""
        one_cpu_thread = device.type == "cpu" and self.threads == 1
        require(self.clock in ("auto", "wall") or one_cpu_thread, "--clock",
                "cpu times one CPU thread; use wall with --threads > 1 or on CUDA")
        if self.clock != "auto":
            return self.clock
        return "cpu" if one_cpu_thread else "wall"


# Tokens per GEMM: training micro-batches (>= 128 tokens). Skinnier GEMMs (decode) stream
# their weights from memory; they sit on the memory side of the roofline, not on this line.
_CPU_GEMM_TOKENS = {True: (128, 512, 2048), False: (128, 256, 512, 1024, 2048)}
_GEMM_KN = {True: ((256, 256), (256, 1024), (1024, 256), (768, 768), (1024, 1024)),
            False: ((256, 256), (256, 1024), (1024, 256), (768, 768), (768, 3072), (3072, 768),
                    (1024, 1024), (1024, 4096), (4096, 1024))}
_GPU_GEMM_TOKENS = {True: (512, 2048, 8192), False: (256, 1024, 2048, 4096, 8192, 16384)}
_GPU_GEMM_KN = {True: ((1024, 1024), (4096, 4096), (4096, 16384), (16384, 4096)),
                False: ((1024, 1024), (2048, 8192), (4096, 4096), (4096, 16384), (16384, 4096), (8192, 8192),
                        (8192, 28672), (28672, 8192))}
_CPU_ATTENTION = {True: ((1, 4, 128, 64), (1, 12, 256, 64), (1, 12, 512, 64), (2, 12, 512, 64), (1, 8, 1024, 64)),
                  False: ((1, 4, 128, 64), (1, 12, 256, 64), (1, 16, 256, 64), (1, 12, 512, 64), (2, 12, 512, 64),
                          (1, 16, 512, 64), (1, 8, 1024, 64), (1, 20, 512, 64), (1, 12, 1024, 64))}
_GPU_ATTENTION = {True: ((4, 16, 1024, 128), (4, 32, 2048, 128), (2, 32, 4096, 128), (1, 32, 8192, 128)),
                  False: ((4, 16, 512, 128), (4, 16, 1024, 128), (4, 32, 2048, 128), (2, 32, 4096, 128),
                          (1, 32, 8192, 128), (1, 64, 8192, 128), (1, 32, 16384, 128))}


def sweep_config(device: torch.device, quick: bool, clock: str = "wall") -> SweepConfig:
    """The kernel sweep for a device kind and mode (shapes of transformer layers on it)."""
    gpu = device.type == "cuda"
    tokens, kn = (_GPU_GEMM_TOKENS, _GPU_GEMM_KN) if gpu else (_CPU_GEMM_TOKENS, _GEMM_KN)
    # CPU: activation-sized tensors (128 KiB to 16 MiB in fp32); above glibc's 32 MiB mmap
    # threshold every output is fresh pages and page faults dominate, not bandwidth.
    memory = tuple(2 ** e for e in (range(14, 30, 3) if gpu else range(15, 23, 2 if quick else 1)))
    return SweepConfig(
        device=device, warmup=2 if quick else 5, repeats=5 if quick else 10,
        gemm_shapes=tuple((m, k, n) for m in tokens[quick] for k, n in kn[quick]),
        attention_shapes=(_GPU_ATTENTION if gpu else _CPU_ATTENTION)[quick], memory_elements=memory,
        max_point_s=0.2 if quick else 1.0, max_sweep_s=15.0 if quick else 60.0, min_step_s=1e-3 if gpu else 2e-3,
        clock=clock)


def collective_configs(options: ProfileOptions, backend: str) -> list[CollectiveConfig]:
    """One config per group size; the largest also measures every rank pair (mesh discovery)."""
    if options.world_sizes is not None:
        sizes = options.world_sizes
    elif backend == "nccl":
        sizes = (torch.cuda.device_count(),) if torch.cuda.device_count() > 1 else ()
    else:
        sizes = (2,) if options.quick else (2, 4)
    exponents = range(12, 23, 2) if options.quick else range(10, 25, 2)
    if backend == "nccl":
        exponents = range(12, 31, 3)
    return [CollectiveConfig(backend=backend, world_size=n, sizes_bytes=tuple(2 ** e for e in exponents),
                             warmup=2 if options.quick else 3, repeats=7 if options.quick else 15,
                             threads=options.threads, measure_pairs=n == max(sizes))
            for n in sorted(sizes) if n >= 2]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _meminfo_bytes(key: str) -> float:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return float(line.split()[1]) * 1024.0
    raise OSError(f"{key} not in /proc/meminfo")


def _rss_bytes() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) * 1024.0
    raise OSError("VmRSS not in /proc/self/status")


def host_info(device: torch.device, options: ProfileOptions, backend: str | None) -> HostInfo:
    """Name, memory per worker and reserved memory of the device (measured before any benchmark)."""
    common = {"threads": options.threads, "logical_cpus": len(os.sched_getaffinity(0)),
              "torch_version": torch.__version__, "backend": backend, "aliases": options.aliases}
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return HostInfo(kind="gpu", name=torch.cuda.get_device_name(device), memory_bytes=float(total),
                        memory_source="torch.cuda.mem_get_info total", reserved_bytes=float(total - free),
                        reserved_source="device memory in use after CUDA initialisation (mem_get_info), measured here",
                        **common)
    total, workers = _meminfo_bytes("MemTotal"), options.workers_per_node
    return HostInfo(kind="cpu", name=f"cpu: {_cpu_model()} ({options.threads} thread/worker)",
                    memory_bytes=total / workers,
                    memory_source=f"MemTotal {total / 2**30:.1f} GiB (/proc/meminfo) shared by {workers} worker processes",
                    reserved_bytes=_rss_bytes(),
                    reserved_source="resident memory of a process with torch and autotune loaded (VmRSS), measured here",
                    **common)


def with_loaded_libraries(host: HostInfo, device: torch.device) -> HostInfo:
    """After the sweeps: the device memory in use that the caching allocator does not hold, now
    that cuBLAS, cuBLASLt and cuDNN have loaded their kernels and handles (CUDA loads modules
    lazily, so the context right after initialisation is smaller than a training process's: on
    an H200 0.51 GiB then, 1.28 GiB in a training step, tests/data/h200/runs.json)."""
    if device.type != "cuda":
        return host
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    outside = float(total - free - torch.cuda.memory_reserved(device))
    if outside <= host.reserved_bytes:
        return host
    return replace(host, reserved_bytes=outside,
                   reserved_source="device memory in use that torch's caching allocator does not hold (mem_get_info "
                                   "minus memory_reserved) after the sweeps: CUDA context with cuBLAS/cuDNN loaded, "
                                   "measured here")


def sweep_steps(dtypes: tuple[str, ...]) -> list[tuple[str, Callable[[SweepConfig, str], SweepResult], str]]:
    """(name, sweep, dtype) in the order they run; FP8 is swept for GEMMs only."""
    unfused = [d for d in dtypes if d not in FP8_SCALINGS]
    steps = [(f"gemm/{d}", gemm_sweep, d) for d in dtypes] + [(f"attention/{d}", attention_sweep, d) for d in unfused]
    return steps + [(f"bmm/{d}", bmm_sweep, d) for d in unfused] + [("memory", memory_sweep, "fp32")]


def _kernel_sweeps(cfg: SweepConfig, dtypes: tuple[str, ...], say: Callable[[str], None]) -> SweepResult:
    result = SweepResult()
    for name, sweep, dtype in sweep_steps(dtypes):
        start = time.perf_counter()
        part = sweep(cfg, dtype)
        say(f"{name}: {len(part.measurements)} points in {time.perf_counter() - start:.1f} s"
            + (f", {len(part.failures)} failed" if part.failures else ""))
        result.extend(part)
    return result


def _default_dtypes(device: torch.device) -> tuple[str, ...]:
    """bf16, fp16, fp32 on GPUs, plus FP8 GEMMs where the GPU has FP8 tensor cores (compute
    capability 8.9: Ada, Hopper and later); fp32, bf16 on CPUs."""
    if device.type != "cuda":
        return ("fp32", "bf16")
    fp8 = tuple(FP8_SCALINGS) if torch.cuda.get_device_capability(device) >= (8, 9) else ()
    return ("bf16", "fp16", "fp32") + fp8


def measure_profile(options: ProfileOptions, say: Callable[[str], None] = lambda _: None) -> ProfileData:
    """Measure kernels and collectives on ``options.device``. Raises ValueError for a device
    that does not exist, profilers.collectives.BackendError when a process group cannot start."""
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    device = resolve_device(options.device)
    torch.set_num_threads(options.threads)
    backend = "nccl" if device.type == "cuda" else "gloo"
    host = host_info(device, options, backend)
    dtypes = options.dtypes or _default_dtypes(device)
    clock = options.kernel_clock(device)
    say(f"kernels timed with the {clock} clock")
    kernels = _kernel_sweeps(sweep_config(device, options.quick, clock), dtypes, say)
    host = with_loaded_libraries(host, device)
    data = ProfileData(host=host, kernels=kernels.measurements, failures=kernels.failures, quick=options.quick,
                       clock=clock)
    for cfg in collective_configs(options, backend):
        t0 = time.perf_counter()
        result = run_collectives(cfg)
        say(f"collectives over {cfg.world_size} {backend} processes: {len(result.measurements)} points "
            f"in {time.perf_counter() - t0:.1f} s")
        data.collectives += result.measurements
        data.failures += result.failures
        if cfg.measure_pairs:
            data.pair_latency_s, data.pair_bandwidth = result.pair_latency_s, result.pair_bandwidth
    data.elapsed_s = time.perf_counter() - start
    data.load_average = (load_start, os.getloadavg()[0])
    return data
