"""Single-device micro-benchmarks: GEMM sweeps, attention forward and backward, memory-bound
kernels. Each returns :class:`autotune.calibrate.fit.Measurement` records (work and time) for
the fits of ``autotune.calibrate.fit``, counted the way the cost model counts them
(``autotune.graph.operators``): a GEMM's 2mkn FLOPs; causal attention's executed FLOPs (half
of the 4 b s^2 h of full attention) forward and 2.5x that backward; an elementwise kernel's
bytes read plus written.

A benchmark point that fails (out of memory, an unsupported dtype) is reported and skipped.
Sweeps run from small to large and stop a dtype once a point takes longer than
``max_point_s`` or the sweep longer than ``max_sweep_s``, so a slow path (bf16 on a CPU
without bf16 units) costs seconds, not hours.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from autotune.calibrate.fit import Measurement
from profilers.timing import time_call

__all__ = ["SweepConfig", "SweepResult", "gemm_sweep", "fp8_gemm_sweep", "bmm_sweep", "attention_sweep",
           "memory_sweep", "TORCH_DTYPES", "FP8_SCALINGS"]

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# FP8 GEMM "dtypes" -> how torch._scaled_mm scales its e4m3 operands: one float32 scale per
# tensor (Transformer Engine's delayed scaling) or one per row of A and column of B (the
# row-wise recipe of torchao's float8 training). GEMMs only: attention and bmm stay in bf16.
FP8_SCALINGS = {"fp8": "tensorwise", "fp8_rowwise": "rowwise"}


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    device: torch.device
    warmup: int
    repeats: int
    gemm_shapes: tuple[tuple[int, int, int], ...]  # (m, k, n)
    attention_shapes: tuple[tuple[int, int, int, int], ...]  # (batch, heads, seq, head_dim)
    memory_elements: tuple[int, ...]
    max_point_s: float = 0.5  # stop a dtype's sweep after a point slower than this
    max_sweep_s: float = 120.0  # ... or once the sweep has run this long
    min_step_s: float = 2e-3  # repeat tiny kernels inside one measured step up to this long
    clock: str = "wall"  # profilers.timing.CLOCKS


@dataclass
class SweepResult:
    measurements: list[Measurement] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def extend(self, other: "SweepResult") -> None:
        self.measurements += other.measurements
        self.failures += other.failures


def _run_points(cfg: SweepConfig, group: str, points: Iterable[tuple[str, float, Callable[[], Callable]]]) -> SweepResult:
    """Time each (label, work, make_fn) point in order; failures are recorded and skipped."""
    result = SweepResult()
    start = time.perf_counter()
    for label, work, make in points:
        if time.perf_counter() - start > cfg.max_sweep_s:
            result.failures.append(f"{group}: stopped after {cfg.max_sweep_s:.0f} s (a slow path); larger points skipped")
            break
        try:
            timing = time_call(make(), device=cfg.device, warmup=cfg.warmup, repeats=cfg.repeats,
                               min_time_s=cfg.min_step_s, clock=cfg.clock)
        except (RuntimeError, MemoryError, NotImplementedError) as err:
            result.failures.append(f"{group} {label}: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
            continue
        finally:
            if cfg.device.type == "cuda":
                torch.cuda.empty_cache()
        result.measurements.append(Measurement.from_samples(group=group, amount=work, samples_s=timing.samples_s,
                                                            label=label))
        if timing.mean_s > cfg.max_point_s:
            break
    return result


def _randn(shape: tuple[int, ...], cfg: SweepConfig, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(shape, device=cfg.device, dtype=dtype, requires_grad=grad)


def gemm_sweep(cfg: SweepConfig, dtype: str) -> SweepResult:
    """Dense matmuls in the three layouts a linear layer runs: forward x W^T, input gradient
    dY W, weight gradient dY^T X. FP8 dtypes go to :func:`fp8_gemm_sweep`."""
    if dtype in FP8_SCALINGS:
        return fp8_gemm_sweep(cfg, dtype)
    tdt = TORCH_DTYPES[dtype]

    def make(m: int, k: int, n: int, layout: str) -> Callable:
        def build() -> Callable:
            if layout == "nt":
                a, b = _randn((m, k), cfg, tdt), _randn((n, k), cfg, tdt)
                return lambda: torch.mm(a, b.t())
            if layout == "tn":
                a, b = _randn((k, m), cfg, tdt), _randn((k, n), cfg, tdt)
                return lambda: torch.mm(a.t(), b)
            a, b = _randn((m, k), cfg, tdt), _randn((k, n), cfg, tdt)
            return lambda: torch.mm(a, b)
        return build

    shapes = sorted(cfg.gemm_shapes, key=lambda s: s[0] * s[1] * s[2])
    layouts = ("nt", "nn", "tn")
    points = ((f"{m}x{k}x{n} {layouts[i % 3]}", 2.0 * m * k * n, make(m, k, n, layouts[i % 3]))
              for i, (m, k, n) in enumerate(shapes))
    return _run_points(cfg, f"gemm/{dtype}", points)


def fp8_gemm_sweep(cfg: SweepConfig, dtype: str = "fp8") -> SweepResult:
    """FP8 (e4m3) GEMMs through ``torch._scaled_mm`` with a bf16 output, in the forward layout
    x W^T only: cuBLASLt's FP8 kernels take A row-major and B column-major, so FP8 training
    materialises transposed copies for the gradient GEMMs. Work counted as 2mkn FLOPs."""
    scaling = FP8_SCALINGS[dtype]
    fp8 = torch.float8_e4m3fn

    def make(m: int, k: int, n: int) -> Callable:
        def build() -> Callable:
            a = _randn((m, k), cfg, torch.bfloat16).to(fp8)
            b = _randn((n, k), cfg, torch.bfloat16).to(fp8).t()  # (k, n), column-major
            shape_a, shape_b = ((m, 1), (1, n)) if scaling == "rowwise" else ((), ())
            scale_a = torch.ones(shape_a, device=cfg.device, dtype=torch.float32)
            scale_b = torch.ones(shape_b, device=cfg.device, dtype=torch.float32)
            return lambda: torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
        return build

    shapes = sorted(cfg.gemm_shapes, key=lambda s: s[0] * s[1] * s[2])
    points = ((f"{m}x{k}x{n} nt {scaling}", 2.0 * m * k * n, make(m, k, n)) for m, k, n in shapes)
    return _run_points(cfg, f"gemm/{dtype}", points)


def bmm_sweep(cfg: SweepConfig, dtype: str) -> SweepResult:
    """Unfused attention's batched matmuls: scores Q K^T and context P V (2 B s^2 d each)."""
    tdt = TORCH_DTYPES[dtype]

    def make(bh: int, s: int, d: int, which: str) -> Callable:
        def build() -> Callable:
            if which == "scores":
                q, k = _randn((bh, s, d), cfg, tdt), _randn((bh, d, s), cfg, tdt)
                return lambda: torch.bmm(q, k)
            p, v = _randn((bh, s, s), cfg, tdt), _randn((bh, s, d), cfg, tdt)
            return lambda: torch.bmm(p, v)
        return build

    shapes = sorted({(b * h, s, d) for b, h, s, d in cfg.attention_shapes}, key=lambda x: x[0] * x[1] ** 2 * x[2])
    points = ((f"{bh}x{s}x{d} {w}", 2.0 * bh * s * s * d, make(bh, s, d, w))
              for bh, s, d in shapes for w in ("scores", "context"))
    return _run_points(cfg, f"bmm/{dtype}", points)


def attention_sweep(cfg: SweepConfig, dtype: str) -> SweepResult:
    """Fused causal attention (scaled_dot_product_attention), forward and backward."""
    tdt = TORCH_DTYPES[dtype]

    def make(b: int, h: int, s: int, d: int, backward: bool) -> Callable:
        def build() -> Callable:
            q, k, v = (_randn((b, h, s, d), cfg, tdt, grad=backward) for _ in range(3))
            if not backward:
                return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            grad = torch.randn_like(out)
            return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
        return build

    shapes = sorted(cfg.attention_shapes, key=lambda x: x[0] * x[1] * x[2] ** 2 * x[3])
    # Executed FLOPs of causal attention, as autotune.graph.operators counts them: 2 b s^2 (h d)
    # forward (QK^T and PV over half the pairs), 2.5x that backward (FlashAttention-2 sec. 3).
    points = ((f"{b}x{h}x{s}x{d} {'bwd' if bwd else 'fwd'}", 2.0 * b * s * s * h * d * (2.5 if bwd else 1.0),
               make(b, h, s, d, bwd)) for b, h, s, d in shapes for bwd in (False, True))
    return _run_points(cfg, f"attention/{dtype}", points)


# Memory-bound kernels a transformer runs, with (tensors read, tensors written). The streaming
# ones price the memory regression (seed 003's "latency + bytes x seconds-per-byte"); the
# others go in "memory_check" and get a per-byte fit each (profile_io.MEMORY_KERNELS), which
# prices the norms, activations and softmax: on a CPU core their transcendentals and
# reductions are compute-bound, not bandwidth-bound.
_STREAMING: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], object], int, int]] = {
    "copy": (lambda x, y: y.copy_(x), 1, 1),
    "add": (lambda x, y: torch.add(x, y), 2, 1),
    "scale": (lambda x, y: torch.mul(x, 0.5), 1, 1),
}
_CHECKED: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], object], int, int]] = {
    "gelu": (lambda x, y: F.gelu(x), 1, 1),
    "softmax": (lambda x, y: torch.softmax(x.view(-1, 256), dim=-1), 1, 1),
    "rms_norm": (lambda x, y: F.rms_norm(x.view(-1, 256), (256,)), 1, 1),
}


def memory_sweep(cfg: SweepConfig, dtype: str = "fp32") -> SweepResult:
    """Elementwise, normalisation and softmax kernels over tensor sizes: bytes read + written."""
    tdt = TORCH_DTYPES[dtype]
    width = torch.tensor([], dtype=tdt).element_size()

    def make(fn: Callable, numel: int) -> Callable:
        def build() -> Callable:
            x, y = _randn((numel,), cfg, tdt), _randn((numel,), cfg, tdt)
            return lambda: fn(x, y)
        return build

    result = SweepResult()
    for group, kernels in (("memory", _STREAMING), ("memory_check", _CHECKED)):
        for name, (fn, reads, writes) in kernels.items():
            points = ((f"{name} {n}", float((reads + writes) * n * width), make(fn, n))
                      for n in sorted(cfg.memory_elements))
            result.extend(_run_points(cfg, group, points))
    return result
