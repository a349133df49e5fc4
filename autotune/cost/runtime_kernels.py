"""The device's kernel fits as a runtime runs them (autotune.spec.runtime.Runtime).

The device profiles price one attention kernel (FlashAttention-2 on A100/H100/H200, cuDNN on
Blackwell), GEMMs at the rate a sustained micro-benchmark reaches, and each norm or activation as
one fused kernel. A runtime that issues another attention kernel, whose GEMMs run slower inside a
step, or that runs norms and activations as eager PyTorch's unfused kernels, sees the fits changed
here, once per (cluster, runtime), before any stage is priced.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from autotune.spec.hardware import ClusterSpec
from autotune.spec.runtime import Runtime

__all__ = ["runtime_cluster", "gpu_generation", "gpu_keys", "GPU_MODELS", "GPU_GENERATIONS", "EAGER_ELEMENTWISE", "kernel_runtime", "unaligned_gemm_fits"]

# GPU names by generation (the kernels a runtime picks depend on it).
GPU_GENERATIONS = {"hopper": ("H100", "H200", "H800", "GH200")}
# GPUs a runtime may state kernel speeds of their own for, measured there (Runtime.kernel_key)
GPU_MODELS = {"h200": ("H200",), "h100": ("H100",), "b200": ("B200",), "gb200": ("GB200",), "b300": ("B300",),
              "gb300": ("GB300",)}

# Eager PyTorch runs a norm or an activation as several kernels, each streaming the whole tensor
# through HBM, where the cost model's operators are one fused kernel (read x, write y): per role,
# (bytes moved / the fused kernel's, kernels launched). Counted from torchtitan's RMSNorm
# (torchtitan/models/norms.py: x.float(), pow, mean, rsqrt, mul, type_as, * weight: 20 B read and
# 16 B written per bf16 element against 2 + 2 fused, 7 launches) and its SwiGLU
# (silu(w1 x) * w3 x: silu r2 w2 plus mul r4 w2 = 10 B per element of the FFN width against the
# fused 6 B, 2 launches). torch.compile fuses both back (Inductor).
EAGER_ELEMENTWISE = {"norm": (36.0 / 4.0, 7), "activation": (10.0 / 6.0, 2)}


def gpu_keys(gpu: str) -> tuple[str, ...]:
    """The keys a runtime's per-GPU kernel speeds are looked up by, most specific first:
    ("h200", "hopper") for an H200, ("other",) for a GPU of no listed generation."""
    words = gpu.upper().replace("-", " ").split()
    model = next((key for key, prefixes in GPU_MODELS.items() if any(w.startswith(prefixes) for w in words)), "")
    return (model, gpu_generation(gpu)) if model else (gpu_generation(gpu),)


def gpu_generation(gpu: str) -> str:
    """'hopper' for an H100/H200 name (a datasheet profile's "H200-SXM-141GB" or a measured one's
    "NVIDIA H200"), else 'other'."""
    words = gpu.upper().replace("-", " ").split()
    return next((gen for gen, prefixes in GPU_GENERATIONS.items() if any(w.startswith(prefixes) for w in words)), "other")


@lru_cache(maxsize=64)
def runtime_cluster(cluster: ClusterSpec, runtime: Runtime) -> ClusterSpec:
    """The cluster with its device's fused-attention fits ``runtime.attention_speed`` times as fast,
    its bf16/fp16 GEMM, attention and memory-bound fits at the runtime's in-step speeds for the
    GPU's generation and, for eager
    runtimes, its norm and activation kernels moving and launching what eager PyTorch does where the
    profile prices them as one fused streaming kernel (a profile that measured torch's own norm or
    activation op, such as `autotune profile` on a CPU, already holds what eager PyTorch runs). The
    same object for the same pair (cluster specs compare by identity), so stage caches keep hitting."""
    cluster = reference_lines(cluster, runtime)
    device = cluster.device
    generation = runtime.kernel_key(gpu_keys(device.name))
    attention, gemm = runtime.attention_speed * runtime.attention_in_step(generation), runtime.gemm_speed(generation)
    memory = runtime.memory_in_step(generation)
    tile = runtime.head_dim_tile(generation)
    unaligned = runtime.gemm_unaligned(generation)
    head_dim_64, head_dim_256 = runtime.head_dim_64_speed(generation), runtime.head_dim_256_speed(generation)
    masked = runtime.mask_slowdown(generation)
    if attention == 1.0 and gemm == 1.0 and memory == 1.0 and not runtime.eager_elementwise and not tile \
            and unaligned == (1.0, 1.0) and not head_dim_64 and not masked \
            and not head_dim_256:
        return cluster
    compute = {key: _scaled(fit, attention if key[0] in ("attention", "attention_bwd") else
                            gemm if key[0] == "gemm" and key[1] in ("bf16", "fp16") else 1.0, runtime.name)
               for key, fit in device.compute.items()}
    compute |= unaligned_gemm_fits(compute, unaligned, runtime.name)
    kernels = {role: _scaled(fit, memory, runtime.name) for role, fit in device.memory_kernels.items()}
    if runtime.eager_elementwise:
        for role, (bytes_ratio, launches) in EAGER_ELEMENTWISE.items():
            if role in device.memory_kernels:  # measured by running torch's own op: already what eager issues
                continue
            fit = _scaled(device.memory_regression(role), memory, runtime.name)
            kernels[role] = replace(fit, latency_s=fit.latency_s * launches,
                                    seconds_per_unit=fit.seconds_per_unit * bytes_ratio,
                                    source=f"{fit.source}; eager PyTorch: x{bytes_ratio:.3g} bytes, {launches} kernels")
    # in-step speeds measured per kernel class take the place of the device's class-blind kernel_efficiency
    efficiency = 1.0 if runtime.measured_in_step(generation) else device.kernel_efficiency
    return cluster.with_changes(device=device.with_changes(compute=compute, memory=_scaled(device.memory, memory, runtime.name),
                                                           memory_kernels=kernels, kernel_efficiency=efficiency,
                                                           attention_head_dim_tile=tile or device.attention_head_dim_tile,
                                                           attention_head_dim_64_speed=head_dim_64 or device.attention_head_dim_64_speed,
                                                           attention_head_dim_256_speed=head_dim_256 or device.attention_head_dim_256_speed,
                                                           attention_mask_slowdown=masked or device.attention_mask_slowdown))


def reference_lines(cluster: ClusterSpec, runtime: Runtime) -> ClusterSpec:
    """The cluster with the GEMM, attention and memory-bound lines of the measured profile its
    runtime's in-step speeds are relative to, where the cluster stands on that GPU's datasheet
    preset (Runtime.in_step_lines): the speeds mean "this much faster than that profile's lines",
    and a datasheet line of the same GPU is another estimate (H100 GEMM: 819 TFLOP/s there, 734 in
    the measured profile). A profile the user measured is kept as it is."""
    device = cluster.device
    name = next((profile for preset, profile in runtime.in_step_lines if preset in device.aliases), "")
    if not name or device.provenance.startswith("measured"):
        return cluster
    from autotune.spec.hardware_data import apply_profile, shipped_profile

    measured = apply_profile(cluster, shipped_profile(name)).device
    return cluster.with_changes(device=device.with_changes(compute={**device.compute, **measured.compute},
                                                           memory=measured.memory, memory_kernels=measured.memory_kernels))


def unaligned_gemm_fits(compute: dict, speeds: tuple[float, float], runtime: str) -> dict:
    """The ("gemm_unaligned", dtype) and ("gemm_unaligned_bwd", dtype) fits: the 16-bit GEMM fits
    at ``speeds`` (forward, backward; cost/compute.py prices a "gemm_unaligned" operator with them)."""
    if speeds == (1.0, 1.0):
        return {}
    return {(f"gemm_unaligned{suffix}", dtype): _scaled(fit, speed, runtime)
            for (op_class, dtype), fit in compute.items() if op_class == "gemm" and dtype in ("bf16", "fp16")
            for suffix, speed in (("", speeds[0]), ("_bwd", speeds[1]))}


def _scaled(fit, speed: float, runtime: str):
    """A compute fit ``speed`` times as fast (unchanged at 1)."""
    if speed == 1.0:
        return fit
    return replace(fit, seconds_per_unit=fit.seconds_per_unit / speed, source=f"{fit.source}; x{speed:.3g} for {runtime}'s kernel")


def kernel_runtime(runtime: Runtime, tables) -> Runtime:
    """The runtime whose kernel speeds ``runtime_cluster`` applies for ``tables``: tables from a
    captured operator stream list every eager kernel themselves, so norms and activations are
    not expanded again; a model with dropout runs its attention at the runtime's in-step speed for
    attention with dropout (SDPA picks another kernel for it: spec/runtime.py
    attention_dropout_in_step_speed)."""
    changes: dict = {}
    if tables.op_stream and runtime.eager_elementwise:
        changes["eager_elementwise"] = False
    if tables.model.dropout and runtime.attention_dropout_in_step_speed:
        changes["attention_in_step_speed"] = tuple(
            (gen, runtime.attention_in_step(gen, dropout=True))
            for gen in dict(runtime.attention_in_step_speed) | dict(runtime.attention_dropout_in_step_speed))
        changes["attention_dropout_in_step_speed"] = ()
    return runtime.with_changes(**changes) if changes else runtime
