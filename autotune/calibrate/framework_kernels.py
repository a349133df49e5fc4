"""Kernels a framework runs on a GPU generation, against the device profile's fitted ones.

The device profiles price one attention kernel (FlashAttention-2 on A100/H100/H200, cuDNN on
Blackwell) and GEMMs at the rate a sustained micro-benchmark reaches. A published run prices
its framework's own kernels: both tables below give a speed relative to the device's fit, per
(framework, GPU generation), ``"*"`` meaning any generation; a pair not listed runs at 1.0.
"""

from __future__ import annotations

__all__ = ["ATTENTION_KERNEL_SPEED", "GEMM_IN_STEP_SPEED", "IN_STEP_GEMM_MEASUREMENTS", "PYTORCH_GEMM_IN_STEP_HOPPER", "GPU_GENERATIONS",
           "gpu_generation", "attention_kernel_speed", "gemm_in_step_speed"]

# llm-foundry's benchmark sweep runs attn_impl "triton" (scripts/train/benchmarking/
# submit_benchmarks.py): FlashAttention in Triton (triton-pre-mlir, llm-foundry v0.3.0 setup.py),
# which FlashAttention-2 beats by 1.3-2.5x (Dao 2023, sec. 4.1); the geometric mean 1.8 is taken.
# torch SDPA (torchtitan) runs FlashAttention-2 on H100, the device's fit: its cuDNN backend was
# opt-in after torch 2.5 (pytorch#138522; 2.6.0.dev20241204 ran 329 TFLOP/s where cuDNN ran 631,
# pytorch#142132) and became the SM90 default only for 2.9 (pytorch#162073, Sep 2025), after
# every torchtitan row here. Transformer Engine (NeMo, Megatron-Core) selects cuDNN's fused
# attention on sm90 since v1.2 (transformer_engine/pytorch/attention.py, "Select FusedAttention
# on sm90 ... for performance"), 1.6x FlashAttention-2 in the FlashAttention-3 paper's H100
# figures (Shah et al. 2024, head dim 128); it is not listed: the cuDNN releases in the
# published containers (9.0 for NeMo 24.03) are not the paper's, and their speed is unsourced.
ATTENTION_KERNEL_SPEED = {("llm-foundry", "*"): 1 / 1.8}

# GEMMs that eager PyTorch issues inside a training step run slower than the same shapes back to
# back: measured on this workplace's H100 (docs/h100-measured.md, torch 2.11, CUDA 13), the GEMM
# kernels of `autotune benchmark` fwd+bwd steps (torch.profiler) against the profile's own
# micro-benchmark line for those GEMMs (h100-sxm-measured.json gemm/bf16: 16.9 us + FLOPs / 734
# TFLOP/s, one forward and two backward GEMMs per weight): (model, batch of 2048-token sequences,
# measured s, line s), the line recomputed by tests/test_framework_kernels.py. Measured on Hopper
# only (A100 keeps the line); applied to the frameworks that issue cuBLAS GEMMs from PyTorch
# (torch.compile leaves matmuls to cuBLAS), not to Transformer Engine's, on which the shared
# kernel_efficiency was fitted; bf16/fp16 GEMMs only (FP8 GEMMs were not measured in a step).
IN_STEP_GEMM_MEASUREMENTS = (("gpt3-1.3b", 4, 116.1e-3, 92.7e-3), ("gpt3-1.3b", 8, 235.6e-3, 180.5e-3),
                             ("gpt3-2.7b", 4, 213.0e-3, 183.7e-3))
# 0.798, 0.766, 0.862 of the line: mean 0.809
PYTORCH_GEMM_IN_STEP_HOPPER = sum(line / measured for _, _, measured, line in IN_STEP_GEMM_MEASUREMENTS) / 3
GEMM_IN_STEP_SPEED = {("llm-foundry", "hopper"): PYTORCH_GEMM_IN_STEP_HOPPER,
                      ("torchtitan", "hopper"): PYTORCH_GEMM_IN_STEP_HOPPER}

# GPU columns by generation (the kernels a framework picks depend on it).
GPU_GENERATIONS = {"hopper": ("H100", "H200", "H800", "GH200")}


def gpu_generation(gpu: str) -> str:
    """'hopper' for an H100/H200 column, else 'other'."""
    return next((gen for gen, prefixes in GPU_GENERATIONS.items() if gpu.upper().startswith(prefixes)), "other")


def _speed(table: dict[tuple[str, str], float], framework: str, gpu: str) -> float:
    return table.get((framework, gpu_generation(gpu)), table.get((framework, "*"), 1.0))


def attention_kernel_speed(framework: str, gpu: str) -> float:
    """The framework's attention kernel on this GPU against the device's fitted one."""
    return _speed(ATTENTION_KERNEL_SPEED, framework, gpu)


def gemm_in_step_speed(framework: str, gpu: str) -> float:
    """The framework's bf16/fp16 GEMMs inside a step against the device's GEMM fit."""
    return _speed(GEMM_IN_STEP_SPEED, framework, gpu)
