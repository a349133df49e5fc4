"""Kernels a framework runs on a GPU generation, against the device profile's fitted ones.

The device profiles price one attention kernel (FlashAttention-2 on A100/H100/H200, cuDNN on
Blackwell) and GEMMs at the rate a sustained micro-benchmark reaches. A published run prices
its framework's own kernels: both tables below give a speed relative to the device's fit, per
(framework, GPU generation), ``"*"`` meaning any generation; a pair not listed runs at 1.0.
"""

from __future__ import annotations

__all__ = ["IN_STEP_GEMM_MEASUREMENTS", "PYTORCH_GEMM_IN_STEP_HOPPER"]

# The attention kernels of llm-foundry (Triton FlashAttention, 1/1.8 of FlashAttention-2's speed),
# torch SDPA and Transformer Engine on Hopper, with their sources, are the runtime presets'
# (autotune/data/runtimes/*.toml attention_speed); the GEMM rate below is their gemm_in_step_speed.


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
