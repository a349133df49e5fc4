"""How fast this machine runs now, against its profile: one profiled GEMM timed again.

A profile prices the machine as it was when measured. A virtual machine whose host is busy
runs everything slower without any process of its own being busy (``/proc/stat`` shows no
load, often no steal), so a step time measured then says more about the host than about the
cost model. The probe times a GEMM of the profile's sweep in ``processes`` workers at once
(one thread each, started together at a barrier, as the plans' workers run) and divides the
slowest worker's median by the profile's GEMM fit for it.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics

from autotune.spec.hardware import DeviceProfile

__all__ = ["machine_slowdown", "PROBE_GEMM"]

PROBE_GEMM = (512, 768, 768)  # (m, k, n): in the CPU profile's sweep, 7.6 ms on one core


def _probe_worker(barrier: object, queue: object, repeats: int, clock: str = "wall") -> None:
    import torch

    from profilers.timing import time_call

    torch.set_num_threads(1)
    m, k, n = PROBE_GEMM
    a, b = torch.randn(m, k), torch.randn(k, n)
    barrier.wait(timeout=120)
    timing = time_call(lambda: torch.mm(a, b), device=torch.device("cpu"), warmup=5, repeats=repeats, clock=clock)
    queue.put(statistics.median(timing.samples_s))


def machine_slowdown(device: DeviceProfile, processes: int = 2, repeats: int = 100, clock: str = "wall") -> float:
    """Measured / profiled time of the probe GEMM with ``processes`` workers running it at
    once (the slowest worker's median); 1.0 is the machine as profiled. ``clock="cpu"`` times
    the workers' own CPU time: the slowdown of the host (clocks, a busy hypervisor, caches and
    memory bandwidth shared with neighbours) without the time other processes held the core,
    which is what divides step times taken net of run-queue wait."""
    context = mp.get_context("spawn")
    barrier, queue = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_probe_worker, args=(barrier, queue, repeats, clock), daemon=True)
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    medians = [queue.get(timeout=180) for _ in workers]
    for worker in workers:
        worker.join(timeout=10)
    m, k, n = PROBE_GEMM
    profiled_s = device.regression("gemm", "fp32").time_s(2.0 * m * k * n) / device.kernel_efficiency
    return max(medians) / profiled_s
