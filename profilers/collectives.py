"""Collective micro-benchmarks with torch.distributed: gloo between CPU processes, NCCL
between GPUs, one process per rank (torch.multiprocessing, spawn).

Message size convention (the one ``autotune.cost.comm`` prices): the full buffer, i.e. the
all-reduce tensor, the gathered output of all-gather, the input of reduce-scatter, each rank's
send buffer of all-to-all, and the message of send/recv (timed as half a ping-pong).

Each measured step starts after a barrier and ends when the op (and the device) is done; the
step's time is the slowest rank's (the collective is finished when every rank is). For
device-mesh discovery every rank pair is also timed by ping-pong, at a small message
(latency) and a large one (bandwidth), while the other ranks wait. ``pair_delay_s`` and
``pair_s_per_byte`` inject extra latency and per-byte time on chosen pairs, to test discovery
on simulated topologies from one machine.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from autotune.calibrate.fit import Measurement

__all__ = ["CollectiveConfig", "CollectiveResult", "run_collectives", "backend_problem", "COLLECTIVE_OPS", "BackendError"]

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


class BackendError(RuntimeError):
    """The process group could not start (backend missing, no devices, workers died)."""


@dataclass(frozen=True, kw_only=True)
class CollectiveConfig:
    backend: str  # "gloo" or "nccl"
    world_size: int
    sizes_bytes: tuple[int, ...]
    warmup: int
    repeats: int
    ops: tuple[str, ...] = COLLECTIVE_OPS
    threads: int = 1  # torch threads per worker process
    measure_pairs: bool = False
    pair_sizes_bytes: tuple[int, int] = (64, 4 << 20)  # (latency probe, bandwidth probe)
    pair_delay_s: tuple[tuple[float, ...], ...] | None = None  # injected, [src][dst]
    pair_s_per_byte: tuple[tuple[float, ...], ...] | None = None  # injected, [src][dst]
    timeout_s: float = 120.0


@dataclass
class CollectiveResult:
    measurements: list[tuple[str, int, Measurement]] = field(default_factory=list)  # (op, group size, m)
    pair_latency_s: list[list[float]] | None = None
    pair_bandwidth: list[list[float]] | None = None
    failures: list[str] = field(default_factory=list)


# torch 2.13 renamed the flat-tensor collectives; older versions have only the old names.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _device(cfg: CollectiveConfig, rank: int) -> torch.device:
    return torch.device("cuda", rank % torch.cuda.device_count()) if cfg.backend == "nccl" else torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _op_call(op: str, nbytes: int, n: int, rank: int, device: torch.device):
    numel = nbytes // 4
    full = torch.ones(numel, device=device)
    part = torch.ones(numel // n, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full)
    if op == "all_gather":
        return lambda: _ALL_GATHER(full, part)
    if op == "reduce_scatter":
        return lambda: _REDUCE_SCATTER(part, full)
    if op == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full)
    return _ping_pong(0, 1, nbytes, rank, device, None)


def _ping_pong(a: int, b: int, nbytes: int, rank: int, device: torch.device, cfg: CollectiveConfig | None):
    """a sends to b, b sends back; timed as half the round trip. Injected delays sleep before a send."""
    buf = torch.ones(max(1, nbytes // 4), device=device)

    def delay(src: int, dst: int) -> None:
        if cfg is not None and cfg.pair_delay_s is not None:
            extra = cfg.pair_delay_s[src][dst] + nbytes * (cfg.pair_s_per_byte[src][dst] if cfg.pair_s_per_byte else 0.0)
            if extra > 0:
                time.sleep(extra)

    def step() -> None:
        if rank == a:
            delay(a, b)
            dist.send(buf, b)
            dist.recv(buf, b)
        elif rank == b:
            dist.recv(buf, a)
            delay(b, a)
            dist.send(buf, a)
    return step


def _slowest(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The element-wise maximum over ranks."""
    value = value.to(device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.cpu()


def _inner_calls(fn, device: torch.device, warmup: int, min_step_s: float = 1e-3) -> int:
    """Warm up, then agree on all ranks how many back-to-back calls make a step of at least
    ``min_step_s`` (from the slowest rank's warm-up call)."""
    start = time.perf_counter()
    for _ in range(max(1, warmup)):
        fn()
    _sync(device)
    once = _slowest(torch.tensor([(time.perf_counter() - start) / max(1, warmup)], dtype=torch.float64), device)
    return max(1, min(200, int(min_step_s / max(float(once[0]), 1e-7))))


def _step_s(fn, device: torch.device, inner: int, divide: float) -> float:
    """One measured step: barrier, ``inner`` back-to-back calls (as nccl-tests times them, which
    spreads the ranks' skew leaving the barrier), sync; this rank's seconds per call."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / (inner * divide)


def _interleaved(calls: dict, device: torch.device, warmup: int, repeats: int, divide: dict) -> dict:
    """Per call, ``repeats`` samples of the slowest rank's time (a collective is done when every
    rank is), measured in rounds of one step per call, so load that changes over time falls on
    all calls alike instead of making some sizes or pairs look slower."""
    inner = {key: _inner_calls(call, device, warmup) for key, call in calls.items()}
    local = {key: [] for key in calls}
    for _ in range(repeats):
        for key, call in calls.items():
            local[key].append(_step_s(call, device, inner[key], divide[key]))
    slowest = _slowest(torch.tensor([local[key] for key in calls], dtype=torch.float64), device)
    return {key: slowest[i].tolist() for i, key in enumerate(calls)}


def _measure_ops(cfg: CollectiveConfig, rank: int, device: torch.device, result: CollectiveResult) -> None:
    n = cfg.world_size
    for op in cfg.ops:
        size = 2 if op == "send_recv" else n
        calls = {nbytes: _op_call(op, nbytes, n, rank, device) for nbytes in sorted(cfg.sizes_bytes)}
        try:
            samples = _interleaved(calls, device, cfg.warmup, cfg.repeats,
                                   dict.fromkeys(calls, 2.0 if op == "send_recv" else 1.0))
        except RuntimeError as err:  # an op the backend lacks: report, skip the op
            result.failures.append(f"{op}/{n}: {str(err).splitlines()[0][:120]}")
            continue
        result.measurements += [(op, size, Measurement.from_samples(
            group=f"{op}/{size}", amount=nbytes, samples_s=samples[nbytes], label=f"{op} n={size} {nbytes} B"))
            for nbytes in calls]


def _measure_pairs(cfg: CollectiveConfig, rank: int, device: torch.device, result: CollectiveResult) -> None:
    """Ping-pong every pair at a small and a large message, in interleaved rounds."""
    n = cfg.world_size
    small, large = cfg.pair_sizes_bytes
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    calls = {(p, size): _ping_pong(*p, size, rank, device, cfg) for p in pairs for size in (small, large)}
    samples = _interleaved(calls, device, cfg.warmup, cfg.repeats, dict.fromkeys(calls, 2.0))
    lat = [[0.0] * n for _ in range(n)]
    bw = [[0.0] * n for _ in range(n)]
    for a, b in pairs:
        t_lo = float(torch.tensor(samples[((a, b), small)]).median())
        t_hi = float(torch.tensor(samples[((a, b), large)]).median())
        lat[a][b] = lat[b][a] = t_lo
        # the large message's extra time over the small one is its transfer; if noise hides
        # it, the whole large-message time is the (pessimistic) transfer time
        bw[a][b] = bw[b][a] = (large - small) / (t_hi - t_lo) if t_hi > 1.5 * t_lo else large / t_hi
    result.pair_latency_s, result.pair_bandwidth = lat, bw


def _worker(rank: int, cfg: CollectiveConfig, port: int, queue) -> None:
    torch.set_num_threads(cfg.threads)
    device = _device(cfg, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    result = CollectiveResult()
    try:
        dist.init_process_group(cfg.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=cfg.world_size, timeout=timedelta(seconds=cfg.timeout_s))
        _measure_ops(cfg, rank, device, result)
        if cfg.measure_pairs:
            _measure_pairs(cfg, rank, device, result)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as err:  # reported to the parent, which raises BackendError
        queue.put((rank, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"))
        return
    queue.put((rank, result if rank == 0 else None))


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot start here, or None."""
    if backend not in ("gloo", "nccl"):
        return f"unknown backend {backend!r}; use gloo or nccl"
    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if backend == "gloo" and not dist.is_gloo_available():
        return "this torch build has no gloo backend"
    if backend == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
        return "NCCL needs CUDA GPUs and a torch build with NCCL; none here (use gloo)"
    return None


def run_collectives(cfg: CollectiveConfig) -> CollectiveResult:
    """Spawn ``cfg.world_size`` worker processes, measure, and return rank 0's results."""
    problem = backend_problem(cfg.backend)
    if problem:
        raise BackendError(problem)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, cfg, port, queue), daemon=True) for r in range(cfg.world_size)]
    for p in procs:
        p.start()
    outcome, errors = None, []
    deadline = time.monotonic() + cfg.timeout_s * 4
    for _ in procs:
        while queue.empty():
            if time.monotonic() > deadline or not any(p.is_alive() for p in procs):
                break
            time.sleep(0.02)
        if queue.empty():
            break
        rank, payload = queue.get()
        if isinstance(payload, str):
            errors.append(f"rank {rank}: {payload}")
        elif rank == 0:
            outcome = payload
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if outcome is None:
        raise BackendError(f"{cfg.backend} with {cfg.world_size} processes failed: "
                           + ("; ".join(errors[:2]) or "workers exited without a result"))
    return outcome
