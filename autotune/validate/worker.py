"""The body of one worker process (one rank): set up, check numerics, measure, report.

Phases: ``numerics_steps`` steps with dropout off on fixed data (their losses are compared
with the single-process reference); one step in training mode whose peak live tensor bytes
are measured (:mod:`autotune.validate.memory`); ``warmup_steps`` untimed steps; then
``measured_steps`` steps, each between two barriers so that every rank times the same
interval. The result (or the error) goes to ``rank<N>.json`` in the run's folder; the
worker's own output goes to ``rank<N>.log`` there (launch.py points stdout and stderr at it).

Run as ``python -m autotune.validate.worker FOLDER RANK PORT`` with ``FOLDER/config.pkl``.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import pickle
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

from autotune.validate.job import RankResult, RunConfig

__all__ = ["run_rank", "result_path", "log_path", "CONFIG_FILE"]

CONFIG_FILE = "config.pkl"

# A collective that waits longer than this has lost its peer; the parent's timeout is the
# backstop, this lets a rank fail with a message first.
COLLECTIVE_TIMEOUT_S = 300


def result_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.json"


def log_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.log"


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker if the launching process dies, so none is left behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_rank(rank: int, config: RunConfig, folder: str, port: int) -> None:
    """Run one rank; exits non-zero after writing its error."""
    _die_with_parent()
    out = Path(folder)
    try:
        result = _run(rank, config, port)
    except BaseException as err:  # noqa: BLE001 - every failure is reported to the parent
        traceback.print_exc()
        error = RankResult(rank=rank, error=f"{type(err).__name__}: {err}", extra={"failed_at": time.time()})
        result_path(out, rank).write_text(json.dumps(error.to_dict()))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    result_path(out, rank).write_text(json.dumps(result.to_dict()))
    sys.stdout.flush()
    sys.stderr.flush()
    # the result is written: skip interpreter teardown, where gloo's and torch's native threads can abort a loaded
    # machine's worker after its work is done (seen once in ~60 CI runs: every result present, one rank's exit non-zero)
    os._exit(0)


def _run(rank: int, config: RunConfig, port: int) -> RankResult:
    import torch
    import torch.distributed as dist

    from autotune.validate.memory import peak_rss_bytes

    torch.set_num_threads(config.threads_per_rank)
    if config.backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    rss_start = peak_rss_bytes()
    dist.init_process_group(config.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=config.world_size, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        _inject_fault(rank, config.fault)
        trainer, losses, memory = _numerics_and_memory(config)
        for step in range(config.warmup_steps):
            trainer.step(config.numerics_steps + 1 + step)
        timed = _timed_steps(trainer, config, dist)
        return RankResult(rank=rank, losses=tuple(x for x in losses if x is not None), step_times_s=tuple(timed["wall"]),
                          run_queue_s=tuple(timed["queued"]), cpu_s=tuple(timed["cpu"]),
                          main_cpu_s=tuple(timed["main_cpu"]),
                          peak_tensor_bytes=memory.peak_bytes, peak_rss_delta_bytes=peak_rss_bytes() - rss_start,
                          extra={"baseline_tensor_bytes": memory.baseline_bytes})
    finally:
        dist.destroy_process_group()


def _numerics_and_memory(config: RunConfig) -> tuple:
    """Build the rank's trainer, run the numerics steps (dropout off) and one step whose
    peak memory is measured: live tensor bytes on the CPU, the caching allocator's peak on
    a GPU. Returns (trainer, losses, tracker)."""
    import torch

    from autotune.validate.memory import TensorMemoryTracker
    from autotune.validate.train import build_trainer

    gpu = config.backend == "nccl"
    with TensorMemoryTracker(enabled=config.measure_memory and not gpu) as memory:
        trainer = build_trainer(config)
        trainer.set_dropout(False)
        losses = [_reduced_loss(trainer) for _ in range(config.numerics_steps)]
        trainer.set_dropout(True)
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with memory.window():
            trainer.step(config.numerics_steps)
    if gpu:
        memory.peak_bytes = float(torch.cuda.max_memory_allocated())
    return trainer, losses, memory


def _inject_fault(rank: int, fault: str) -> None:
    if rank != 1 or fault not in ("crash", "hang"):
        return
    if fault == "crash":
        os._exit(3)
    while True:  # a hung rank: the parent's timeout must end it
        time.sleep(60)


def _reduced_loss(trainer: object) -> float | None:
    """A step on the batch of step 0 (the same every time, so the loss falls as the model
    fits it and a wrong gradient shows); its mean loss over the data-parallel replicas
    (None where no loss is computed)."""
    import torch.distributed as dist

    loss = trainer.step(0)
    if loss is None:
        return None
    total = loss.detach().clone().float()
    dist.all_reduce(total, group=trainer.dp_group)
    return float(total) / dist.get_world_size(trainer.dp_group)


def _schedstat() -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a CPU) of this thread so far (Linux
    schedstat; zeros elsewhere). Other processes' load stretches wall time by the wait; the
    report gives it beside the wall time so that load can be told from the plan's own cost."""
    try:
        with open("/proc/thread-self/schedstat") as handle:
            fields = handle.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def _device_sync(config: RunConfig) -> None:
    if config.backend == "nccl":
        import torch

        torch.cuda.synchronize()


def _timed_steps(trainer: object, config: RunConfig, dist: object) -> dict[str, list[float]]:
    """Per measured step: wall seconds; the main thread's CPU and run-queue seconds; CPU
    seconds of the whole process (compute plus the communication threads)."""
    first = config.numerics_steps + 1 + config.warmup_steps
    out: dict[str, list[float]] = {"wall": [], "main_cpu": [], "queued": [], "cpu": []}
    for step in range(first, first + config.measured_steps):
        dist.barrier()
        start, (main, queued), cpu = time.perf_counter(), _schedstat(), time.process_time()
        trainer.step(step)
        _device_sync(config)
        dist.barrier()
        end_main, end_queued = _schedstat()
        out["wall"].append(time.perf_counter() - start)
        out["main_cpu"].append(end_main - main)
        out["queued"].append(end_queued - queued)
        out["cpu"].append(time.process_time() - cpu)
    return out


def main(argv: list[str]) -> None:
    faulthandler.enable()  # a native abort (gloo's size checks) still prints the Python stack to the log
    folder, rank, port = Path(argv[0]), int(argv[1]), int(argv[2])
    config = pickle.loads((folder / CONFIG_FILE).read_bytes())
    run_rank(rank, config, str(folder), port)


if __name__ == "__main__":
    main(sys.argv[1:])
