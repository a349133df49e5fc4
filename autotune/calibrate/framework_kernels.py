"""Kernels a framework runs on a GPU generation, against the device profile's fitted ones.

The device profiles price one attention kernel (FlashAttention-2 on A100/H100/H200, cuDNN on
Blackwell) and GEMMs at the rate a sustained micro-benchmark reaches. A published run prices
its framework's own kernels: both tables below give a speed relative to the device's fit, per
(framework, GPU generation), ``"*"`` meaning any generation; a pair not listed runs at 1.0.
"""

from __future__ import annotations

__all__ = ["IN_STEP_GEMM_MEASUREMENTS", "PYTORCH_GEMM_IN_STEP_HOPPER", "IN_STEP_KERNEL_MEASUREMENTS",
           "H200_KERNEL_MEASUREMENTS", "IN_STEP_SOURCES", "H200_HEAD_DIM_64_ATTENTION", "head_dim_64_attention_speed",
           "masked_attention_slowdown", "head_dim_256_attention_speed",
           "stream_class_seconds", "stream_in_step_speeds"]

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
# Those steps' GEMMs include the LM head's three GEMMs over the 50,257-token vocabulary, which run
# cuBLAS's align1 kernels (issue 27: tests/data/h200/check-2026-11-27); priced as such, the layer
# GEMMs ran at 1.1x the line (IN_STEP_SOURCES below). llm-foundry and torchtitan keep 0.809: their
# published Hopper rows are matched there, so it stands for a slowdown not yet located.
PYTORCH_GEMM_IN_STEP_HOPPER = sum(line / measured for _, _, measured, line in IN_STEP_GEMM_MEASUREMENTS) / 3


# Per-class CUDA kernel time of the same `autotune benchmark` fwd+bwd steps on this workplace's H100
# (docs/h100-measured.md, "Where the step goes"; torch.profiler over 5 steps): (model, batch of
# 2048-token sequences, GEMM s, attention s, other kernels s). The runtimes priced from their
# operator streams (torch, transformers) take their in-step speeds from these against the stream
# priced by that H100's measured lines (stream_in_step_speeds).
IN_STEP_KERNEL_MEASUREMENTS = (("gpt3-1.3b", 4, 116.1e-3, 18.8e-3, 62.9e-3), ("gpt3-1.3b", 8, 235.6e-3, 36.3e-3, 113.7e-3),
                               ("gpt3-2.7b", 4, 213.0e-3, 47.8e-3, 100.9e-3))
# The same classes from one H200 step traced kernel by kernel (scripts/gpu_trace.py, 2026-11-27,
# torch 2.11+cu130; tests/data/h200/check-2026-11-27/trace.json, plan a: gpt3-1.3b 8 x 2048, dropout
# 0.1, cuDNN attention), priced by that H200's measured profile. Its GEMMs include the LM head's
# three align1 GEMMs over the 50,257-token vocabulary (83.4 ms of 234.9): the H100 figures above
# included the same, so every row prices the head as "gemm_unaligned" (graph/opstream.py).
H200_KERNEL_MEASUREMENTS = (("gpt3-1.3b", 8, 234.94e-3, 39.33e-3, 88.24e-3),)
# the runtime key the rows give speeds for (Runtime.kernel_key: "hopper" for any Hopper GPU, "h200"
# for the H200 itself) -> (measured device profile the rows are priced with, rows)
IN_STEP_SOURCES = {"hopper": ("h100-sxm-measured.json", IN_STEP_KERNEL_MEASUREMENTS),
                   "h200": ("h200-measured.json", H200_KERNEL_MEASUREMENTS)}
# the fused attention kernels' speed depends on the head dimension (cost/compute.py
# attention_head_dim_speed): the attention in-step speed is taken where the fits were, at 128
_ATTENTION_HEAD_DIM = 128


def stream_class_seconds(profile: str, name: str, batch: int) -> dict[str, float]:
    """The reference model's fwd+bwd kernels of one step at ``batch`` x 2048 tokens, captured
    operator stream (runtime torch) priced by ``profile``'s lines (no in-step speed; unaligned
    GEMMs at the runtime's unaligned speed over the line), by class: {"gemm", "attention", "other"} seconds."""
    from autotune.cost.compute import block_times
    from autotune.cost.runtime_kernels import gpu_keys, unaligned_gemm_fits
    from autotune.graph.table import runtime_tables
    from autotune.spec.presets import load_preset
    from autotune.spec.resolve import resolve_cluster
    from autotune.spec.runtime import load_runtime
    from autotune.spec.workload import TrainingWorkload

    model = load_preset(name)
    tables = runtime_tables(model, TrainingWorkload(global_batch=batch, seq_len=2048), load_runtime("torch"))
    device = resolve_cluster("dgx-h100", profile=profile).device
    torch_runtime = load_runtime("torch")
    unaligned = torch_runtime.gemm_unaligned(torch_runtime.kernel_key(gpu_keys(device.name)))
    device = device.with_changes(compute={**device.compute, **unaligned_gemm_fits(device.compute, unaligned, "torch")})
    totals = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for block, count in (("layer", model.num_layers), ("embedding", 1), ("head", 1)):
        table = getattr(tables, block)
        times = block_times(table, device, "bf16", batch, 1, 1, False)
        for kind, seconds in zip(table.kinds, (times.fwd_ops_s + times.bwd_ops_s).reshape(-1)):
            cls = "gemm" if kind in ("gemm", "gemm_unaligned") else kind
            totals[cls if cls in ("gemm", "attention") else "other"] += count * float(seconds)
    return totals


def stream_in_step_speeds(devices_dir: str, key: str) -> dict[str, float]:
    """Line seconds over measured seconds per class, summed over the rows of IN_STEP_SOURCES[key],
    priced by that GPU's measured profile in ``devices_dir`` (attention over the runs at head dimension 128)."""
    from pathlib import Path

    from autotune.spec.presets import load_preset

    line = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    measured = dict(line)
    profile_name, rows = IN_STEP_SOURCES[key]
    profile = str(Path(devices_dir) / profile_name)
    for name, batch, gemm_s, attention_s, other_s in rows:
        priced = stream_class_seconds(profile, name, batch)
        for cls, seconds in (("gemm", gemm_s), ("attention", attention_s), ("other", other_s)):
            if cls == "attention" and load_preset(name).head_dim != _ATTENTION_HEAD_DIM:
                continue
            line[cls] += priced[cls]
            measured[cls] += seconds
    return {cls: line[cls] / measured[cls] for cls in line}


# transformers' Llama-3.2-1B (head dim 64, no dropout: cuDNN's attention) traced on the H200
# (scripts/gpu_trace.py, tests/data/h200/check-2026-11-27/trace.json): (micro-batch, sequence,
# full recomputation, seconds of its attention kernels in the step)
H200_HEAD_DIM_64_ATTENTION = ((4, 2048, False, 12.78e-3), (8, 4096, True, 106.04e-3))


def head_dim_64_attention_speed(profile: str, model, in_step: float = 1.0) -> float:
    """The attention kernels at head dim 64 inside those steps of ``model`` (Llama-3.2-1B's spec,
    tests/data/h200/hf/llama-3.2-1b.json) over ``profile``'s (head dim 128) attention lines, each
    pass priced from the transformers-llama stream (a recomputed step runs the forward twice):
    summed line seconds over summed measured seconds, over the runtime's ``in_step`` attention speed
    at head dim 128 (the figure multiplies it)."""
    from dataclasses import replace

    from autotune.cost.compute import block_times
    from autotune.graph.table import runtime_tables
    from autotune.spec.resolve import resolve_cluster
    from autotune.spec.runtime import load_runtime
    from autotune.spec.workload import TrainingWorkload

    device = resolve_cluster("dgx-h200", profile=profile).device
    device = replace(device, attention_head_dim_64_speed=1.0, attention_head_dim_tile=0)
    line = measured = 0.0
    for batch, seq_len, recompute, seconds in H200_HEAD_DIM_64_ATTENTION:
        table = runtime_tables(model, TrainingWorkload(global_batch=batch, seq_len=seq_len), load_runtime("transformers")).layer
        times = block_times(table, device, "bf16", batch, 1, 1, False)
        attention = [i for i, kind in enumerate(table.kinds) if kind == "attention"]
        fwd, bwd = (float(times.fwd_ops_s.reshape(-1)[attention].sum()), float(times.bwd_ops_s.reshape(-1)[attention].sum()))
        line += model.num_layers * ((2.0 if recompute else 1.0) * fwd + bwd)
        measured += seconds
    return line / measured / in_step


def masked_attention_slowdown(rates: dict) -> dict[int, tuple[float, float]]:
    """Per head dim, (forward, backward) time of SDPA given the causal pattern as a boolean mask over
    its time with is_causal, averaged over the shapes scripts/gpu_kernel_rates.py timed both ways
    without dropout (``rates``: its JSON; tests/data/h200/check-2026-11-27b/kernel_rates_sdpa.json)."""
    rows = [r for r in rates["sdpa_head_dims"] if r.get("dropout_p") == 0.0 and "error" not in r]
    causal = {(r["batch"], r["seq"], r["head_dim"]): r for r in rows if not r.get("masked")}
    ratios: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        base = causal.get((r["batch"], r["seq"], r["head_dim"]))
        if r.get("masked") and base:
            ratios.setdefault(r["head_dim"], []).append((r["fwd_ms"] / base["fwd_ms"], r["bwd_ms"] / base["bwd_ms"]))
    return {d: (sum(f for f, _ in v) / len(v), sum(b for _, b in v) / len(v)) for d, v in sorted(ratios.items())}


def head_dim_256_attention_speed(rates: dict) -> float:
    """SDPA's causal forward+backward time at head dim 128 over its time at 256 with the width held
    (the same FLOPs), averaged over the shapes scripts/gpu_kernel_rates.py timed without dropout."""
    rows = {(r["batch"], r["seq"], r["head_dim"]): r["fwd_ms"] + r["bwd_ms"] for r in rates["sdpa_head_dims"]
            if r.get("dropout_p") == 0.0 and not r.get("masked") and "error" not in r}
    ratios = [rows[(b, s, 128)] / rows[(b, s, 256)] for b, s, d in rows if d == 256 and (b, s, 128) in rows]
    return sum(ratios) / len(ratios)
