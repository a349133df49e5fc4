"""Hardware as data: device profiles (roofline regressions, memory tiers) and clusters (meshes).

Numbers live in ``autotune/data/devices/*.toml`` and ``autotune/data/clusters.toml``, each with
its source. This module only defines the frozen types and validates them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType

from autotune.errors import AutotuneError, require
from autotune.spec.limits import check_limit

__all__ = [
    "Regression", "MemoryTier", "DeviceProfile", "LinkLevel", "ClusterSpec", "TIER_NAMES",
    "COLLECTIVES", "MEMORY_KERNEL_ROLES",
]

TIER_NAMES = ("sram", "hbm", "host", "cxl")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
# Memory-bound kernels a profile may fit apart from streaming copies (DeviceProfile.memory_kernels).
MEMORY_KERNEL_ROLES = ("norm", "activation", "softmax")


def _finite_nonneg(field_name: str, value: float) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    require(ok and value >= 0, field_name, f"must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Regression:
    """``time_s = latency_s + x * seconds_per_unit`` where x is FLOPs or bytes.

    ``residual_rel_std`` is the relative standard deviation of the fit's residuals (measured
    profiles) or of the prediction errors it was checked against (shipped profiles); estimates
    turn it into their uncertainty band.
    """

    latency_s: float
    seconds_per_unit: float
    source: str = ""
    r2: float | None = None
    residual_rel_std: float = 0.0
    num_points: int = 0
    # A GEMM's serial main loop (0: none): with few rows its tiles fit in one wave, so a tile's loop over the
    # reduction dimension K sets the time, ``serial_latency_s + K * seconds_per_reduction`` plus the weights'
    # stream at the memory fit (cost/serving_ops.py ops_s); an engine's serving GEMM fits measure it
    serial_latency_s: float = 0.0
    seconds_per_reduction: float = 0.0
    # Fitted, without any derating, to an engine's own op as the engine ran it (aiconfigurator's collector
    # timing the engine's Linear in a CUDA graph): the serving step prices it as fitted, not over the
    # device's kernel_efficiency, which stands for the gap between micro-benchmark lines and whole training
    # steps (cost/serving_ops.py ops_s). Fits made through ops_s itself (scripts/fit_engine_moe.py) carry
    # the efficiency in their values and leave this off.
    in_engine: bool = False

    def __post_init__(self) -> None:
        _finite_nonneg("regression.latency_s", self.latency_s)
        _finite_nonneg("regression.serial_latency_s", self.serial_latency_s)
        _finite_nonneg("regression.seconds_per_reduction", self.seconds_per_reduction)
        _finite_nonneg("regression.seconds_per_unit", self.seconds_per_unit)
        require(self.seconds_per_unit > 0, "regression.seconds_per_unit", "must be > 0")
        _finite_nonneg("regression.residual_rel_std", self.residual_rel_std)

    def time_s(self, amount: float) -> float:
        return self.latency_s + amount * self.seconds_per_unit

    @property
    def throughput(self) -> float:
        """Asymptotic units per second (FLOP/s or bytes/s)."""
        return 1.0 / self.seconds_per_unit


@dataclass(frozen=True, kw_only=True)
class MemoryTier:
    """A place tensors can live: on-chip cache, HBM, host DRAM or CXL-attached memory."""

    name: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = ""

    def __post_init__(self) -> None:
        require(self.name in TIER_NAMES, "tier.name", f"{self.name!r}; valid: {', '.join(TIER_NAMES)}")
        for name in ("capacity_bytes", "bandwidth_bytes_per_s"):
            value = getattr(self, name)
            _finite_nonneg(f"tier.{self.name}.{name}", value)
            require(value > 0, f"tier.{self.name}.{name}", "must be > 0 (a tier with no capacity or bandwidth cannot hold data)")
        _finite_nonneg(f"tier.{self.name}.latency_s", self.latency_s)


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, kw_only=True, eq=False)
class DeviceProfile:
    """One accelerator (or the local CPU): peaks, memory tiers and the cost-model regressions.

    Compared and hashed by identity (caches key on the object); ``fingerprint`` identifies
    the numbers. ``compute[(op_class, dtype)]`` is the compute regression (per FLOP) of an operator class:
    ``gemm`` (dense matmuls), ``bmm`` (attention's batched matmuls when unfused),
    ``attention`` (a fused flash-attention kernel) and, where a profile timed it apart,
    ``attention_bwd`` (that kernel's backward; else ``attention`` prices both passes). ``memory`` is the regression (per byte) of
    memory-bound kernels against the HBM tier; ``memory_kernels`` optionally holds measured
    per-byte fits of memory-bound kernels that do more than stream (``norm``, ``activation``,
    ``softmax``: on a CPU core their reductions and transcendentals are compute bound), which
    price those operators instead (:meth:`memory_regression`). ``reserved_bytes`` is device memory that
    tensors cannot use (CUDA context, library workspaces, allocator fragmentation).
    ``kernel_efficiency`` is the share of micro-benchmark speed that kernels keep inside a
    whole training step (sustained clocks, launch gaps, framework overhead); kernel times are
    divided by it, but for fits made on an engine's own op (``Regression.in_engine``).
    """

    name: str
    kind: str
    peak_flops: Mapping[str, float]
    tiers: tuple[MemoryTier, ...]
    compute: Mapping[tuple[str, str], Regression]
    memory: Regression
    reserved_bytes: float
    provenance: str
    aliases: tuple[str, ...] = ()
    kernel_efficiency: float = 1.0
    kernel_efficiency_source: str = ""
    memory_kernels: Mapping[str, Regression] = field(default_factory=dict)
    # FP8 GEMMs take operands in any layout (Blackwell sm_100); false: only "TN" (Hopper), so a
    # per-tensor FP8 cast also writes a transposed copy for the backward GEMMs (cost/compute.py)
    fp8_gemm_any_layout: bool = False
    # The attention fit's speed at head dim 64 over its speed at 128 (the fits are taken at 128):
    # smaller heads do less matmul work per score, so the kernel's softmax (exp) share grows
    # (cost/compute.py attention_head_dim_speed); 1.0 where no figure is known
    attention_head_dim_64_speed: float = 1.0
    # the same at head dim 256 (set per runtime and GPU generation by cost/runtime_kernels.py,
    # Runtime.attention_head_dim_256_speed); 1.0 where no figure is known
    attention_head_dim_256_speed: float = 1.0
    attention_head_dim_source: str = ""
    # The head-dimension granularity the attention kernel computes at (a head is padded to a multiple
    # of it; cost/compute.py attention_head_dim_speed); 0: not modelled. Set per runtime and GPU
    # generation by cost/runtime_kernels.py (Runtime.attention_head_dim_tile), not by profiles.
    attention_head_dim_tile: int = 0
    # (head dim, forward, backward) time of the attention kernel given a mask over it with is_causal
    # (cost/compute.py attention_mask_slowdown); set per runtime and GPU generation by
    # cost/runtime_kernels.py (Runtime.attention_mask_slowdown); () where none was measured
    attention_mask_slowdown: tuple[tuple[float, float, float], ...] = ()

    def __post_init__(self) -> None:
        require(self.kind in ("gpu", "cpu"), "device.kind", "must be 'gpu' or 'cpu'")
        speed = self.attention_head_dim_64_speed
        require(isinstance(speed, (int, float)) and 0 < speed <= 1, "device.attention_head_dim_64_speed",
                f"must be in (0, 1], got {speed!r}")
        speed = self.attention_head_dim_256_speed
        require(isinstance(speed, (int, float)) and 0 < speed <= 1, "device.attention_head_dim_256_speed",
                f"must be in (0, 1], got {speed!r}")
        require(isinstance(self.fp8_gemm_any_layout, bool), "device.fp8_gemm_any_layout", "must be true or false")
        tile = self.attention_head_dim_tile
        require(isinstance(tile, int) and not isinstance(tile, bool) and tile >= 0, "device.attention_head_dim_tile",
                f"must be an integer >= 0 (0: not modelled), got {tile!r}")
        unknown = sorted(set(self.memory_kernels) - set(MEMORY_KERNEL_ROLES))
        require(not unknown, "device.regressions.memory_kernels",
                f"unknown kernel {', '.join(unknown)}; known: {', '.join(MEMORY_KERNEL_ROLES)}")
        require(0 < self.kernel_efficiency <= 1, "device.kernel_efficiency",
                f"must be in (0, 1], got {self.kernel_efficiency!r}")
        names = [t.name for t in self.tiers]
        require("hbm" in names, "device.tiers", "needs an 'hbm' tier (device memory)")
        require(len(set(names)) == len(names), "device.tiers", "tier names must be unique")
        for dtype, flops in self.peak_flops.items():
            _finite_nonneg(f"device.peak_flops.{dtype}", flops)
        _finite_nonneg("device.reserved_bytes", self.reserved_bytes)
        require(self.reserved_bytes < self.tier("hbm").capacity_bytes, "device.reserved_bytes",
                "must be below the HBM capacity")
        object.__setattr__(self, "peak_flops", _frozen(self.peak_flops))
        object.__setattr__(self, "compute", _frozen(self.compute))
        object.__setattr__(self, "memory_kernels", _frozen(self.memory_kernels))

    def tier(self, name: str) -> MemoryTier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise AutotuneError("device.tiers", f"{self.name} has no {name!r} tier; it has {', '.join(t.name for t in self.tiers)}")

    def has_tier(self, name: str) -> bool:
        return any(t.name == name for t in self.tiers)

    @property
    def memory_bytes(self) -> float:
        """Device (HBM) capacity."""
        return self.tier("hbm").capacity_bytes

    @property
    def usable_memory_bytes(self) -> float:
        return self.memory_bytes - self.reserved_bytes

    def regression(self, op_class: str, dtype: str) -> Regression:
        key = (op_class, dtype)
        if key in self.compute:
            return self.compute[key]
        if (op_class, "bf16") in self.compute and dtype == "fp16":
            return self.compute[(op_class, "bf16")]
        if op_class == "attention_bwd":  # no backward line of its own: the attention fit prices both passes
            return self.regression("attention", dtype)
        if op_class != "gemm":
            return self.regression("gemm", dtype)
        have = sorted({d for (_, d) in self.compute})
        raise AutotuneError("dtype", f"{self.name} has no compute regression for {op_class}/{dtype}; "
                                     f"its profile fits {', '.join(have) or 'no dtype'}")

    def require_dtype(self, dtype: str) -> None:
        """Refuse a training dtype whose GEMMs this device has no fit for (no such tensor
        cores: FP8 before Hopper, MXFP8/NVFP4 before Blackwell)."""
        gemm = dtype  # low-precision recipes name their GEMM format (spec.workload.gemm_dtype)
        fitted = sorted({d for (c, d) in self.compute if c == "gemm"})
        usable = next((d for d in ("bf16", "fp16") if d in fitted), "a dtype it fits")  # Volta: fp16 only
        require(("gemm", gemm) in self.compute or (dtype == "fp16" and ("gemm", "bf16") in self.compute), "dtype",
                f"{self.name} cannot run {dtype}: its profile has no {gemm} GEMM (no such tensor cores); "
                f"use {usable}, or a device that has them (fits for: {', '.join(fitted)})")

    def memory_regression(self, role: str) -> Regression:
        """The per-byte fit pricing memory-bound operators of ``role`` (``stream`` or one of
        MEMORY_KERNEL_ROLES): its own measured fit where the profile has one, else ``memory``."""
        return self.memory_kernels.get(role, self.memory)

    def peak(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype`` (used for MFU)."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        raise AutotuneError("dtype", f"{self.name} has no peak FLOP/s for {dtype}; known: {', '.join(self.peak_flops)}")

    def with_changes(self, **changes: object) -> "DeviceProfile":
        return replace(self, **changes)


@dataclass(frozen=True, kw_only=True, eq=False)
class LinkLevel:
    """One level of the network hierarchy (one device-mesh dimension).

    A collective on this level costs ``latency_s`` once, ``alpha_s`` per ring or tree step,
    and ``beta_s_per_byte`` (the inverse of the achieved per-GPU bus bandwidth) per byte moved.
    ``collectives`` optionally holds measured ``time = latency + bytes * seconds_per_byte``
    fits per (collective, group size) from ``autotune profile``; they replace the formulas.
    """

    name: str
    latency_s: float
    alpha_s: float
    beta_s_per_byte: float
    source: str = ""
    collectives: Mapping[tuple[str, int], Regression] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _finite_nonneg(f"link.{self.name}.latency_s", self.latency_s)
        _finite_nonneg(f"link.{self.name}.alpha_s", self.alpha_s)
        _finite_nonneg(f"link.{self.name}.beta_s_per_byte", self.beta_s_per_byte)
        require(self.beta_s_per_byte > 0, f"link.{self.name}.bandwidth", "must be > 0")
        object.__setattr__(self, "collectives", _frozen(self.collectives))

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return 1.0 / self.beta_s_per_byte


@dataclass(frozen=True, kw_only=True, eq=False)
class ClusterSpec:
    """Nodes of ``gpus_per_node`` identical devices: a two-level mesh (intra-node, inter-node).

    ``host_link`` is the device-host path (PCIe) and ``cxl_link`` the path to CXL memory, used
    when a tensor class is offloaded. ``max_nodes`` of ``None`` means "as many as asked for".
    ``cores_per_node`` (CPU clusters, where a "GPU" is one worker process) is the number of
    cores the node's workers share; ``None`` for GPU clusters (see :meth:`for_gpus`).
    ``comm_overlaps_compute`` is False where no core is spare for communication (see
    :meth:`for_gpus`): collectives then cost their full time.
    """

    name: str
    device: DeviceProfile
    gpus_per_node: int
    intra_node: LinkLevel
    inter_node: LinkLevel
    host_link: LinkLevel
    cxl_link: LinkLevel | None = None
    max_nodes: int | None = None
    source: str = ""
    cores_per_node: int | None = None
    comm_overlaps_compute: bool = True
    # GPUs per node a job spanning several nodes may use of each, where not all (an NVL72 rack's
    # 64-GPU slices): ``gpus`` = k x slice forms k nodes of ``slice`` GPUs (see :meth:`for_gpus`)
    node_slices: tuple[int, ...] = ()
    # host seconds of one nn.Linear forward issued from Python, where measured on this cluster's
    # host (cost/host.py prices each kernel-launching operator from it); None: the CPU family's
    host_linear_fwd_s: float | None = None

    def __post_init__(self) -> None:
        require(self.host_linear_fwd_s is None or 1e-7 <= self.host_linear_fwd_s <= 1e-3, "cluster.host_linear_fwd_s",
                f"must be seconds between 1e-7 and 1e-3 (a Linear's host time is ~1e-5), got {self.host_linear_fwd_s!r}")
        require(isinstance(self.gpus_per_node, int) and self.gpus_per_node > 0,
                "cluster.gpus_per_node", "must be a positive integer")
        require(all(isinstance(s, int) and 0 < s < self.gpus_per_node for s in self.node_slices), "cluster.node_slices",
                f"must be GPU counts below gpus_per_node {self.gpus_per_node}, got {list(self.node_slices)}")
        require(self.cores_per_node is None or (isinstance(self.cores_per_node, int) and self.cores_per_node > 0),
                "cluster.cores_per_node", f"must be a positive integer, got {self.cores_per_node!r}")

    def for_gpus(self, gpus: int) -> "ClusterSpec":
        """The cluster as ``gpus`` workers see it: on a CPU node with more worker processes than
        cores, each worker gets cores/workers of a core, so its kernels run that much slower
        (the device profile was measured with a core to itself). With as many workers as cores
        or more, no core is left for gloo's collectives, which are CPU work (their threads use
        about the collective's fitted time in CPU, measured by ``autotune validate``), so they
        cannot hide behind compute. Unchanged otherwise."""
        if slice_ := self._slice(gpus):  # nodes of which the job uses a slice each
            return _sliced(self, slice_)
        workers = min(gpus, self.gpus_per_node)
        if self.cores_per_node is None or workers < max(2, self.cores_per_node):
            return self
        return _oversubscribed(self, min(1.0, self.cores_per_node / workers))

    def _slice(self, gpus: int) -> int:
        """The node slice ``gpus`` spans whole nodes of, where it spans none of the full nodes; else 0."""
        if gpus <= self.gpus_per_node or gpus % self.gpus_per_node == 0:
            return 0
        return max((s for s in self.node_slices if gpus % s == 0), default=0)

    def check_gpus(self, gpus: int) -> None:
        """GPU counts this cluster can form: up to one node, or whole nodes."""
        require(isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0, "gpus",
                f"must be a positive integer, got {gpus!r}")
        check_limit("gpus", gpus, "gpus")
        per = self.gpus_per_node
        slices = "".join(f" or of {s}" for s in self.node_slices)
        require(gpus <= per or gpus % per == 0 or self._slice(gpus), "gpus",
                f"{gpus} GPUs cannot be formed on {self.name}: use at most {per} (one node) "
                f"or a multiple of {per}{slices} (whole nodes), e.g. {max(per, gpus // per * per)} or {(gpus // per + 1) * per}")
        if self.max_nodes is not None:
            require(self.num_nodes(gpus) <= self.max_nodes, "gpus",
                    f"{gpus} GPUs need {self.num_nodes(gpus)} nodes; {self.name} has {self.max_nodes} "
                    f"(at most {self.max_nodes * per} GPUs)")

    def num_nodes(self, gpus: int) -> int:
        return max(1, -(-gpus // self.gpus_per_node))

    def with_changes(self, **changes: object) -> "ClusterSpec":
        return replace(self, **changes)


@lru_cache(maxsize=64)
def _sliced(cluster: ClusterSpec, gpus_per_node: int) -> ClusterSpec:
    # Cached: one object per (cluster, slice), so the cost model's caches keep hitting.
    return cluster.with_changes(gpus_per_node=gpus_per_node, node_slices=())


@lru_cache(maxsize=64)
def _oversubscribed(cluster: ClusterSpec, core_share: float) -> ClusterSpec:
    # Cached so the cost model's per-device caches see one device object per (cluster, share).
    device = cluster.device
    if core_share < 1.0:
        device = device.with_changes(
            kernel_efficiency=device.kernel_efficiency * core_share,
            kernel_efficiency_source=f"{device.kernel_efficiency_source}; x{core_share:.3g}: workers share cores")
    # cores_per_node=None: the result is the workers' view already (for_gpus is idempotent).
    return cluster.with_changes(device=device, comm_overlaps_compute=False, cores_per_node=None)
