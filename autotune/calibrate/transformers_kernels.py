"""transformers' own kernels inside its training steps, by class, from steps traced kernel by kernel
on one H200 and one H100 (scripts/gpu_trace.py, 2026-11-27, torch 2.11+cu130, transformers 5.17).

The eager runtimes' in-step speeds were first taken from autotune's reference model (runtime torch:
calibrate/framework_kernels.py). transformers issues other kernels (separate Q/K/V GEMMs, K/V
repeated to every head, RMSNorm and RoPE in fp32 eager ops, the loss over a 128K-256K vocabulary),
and its traced steps run them at other speeds: its memory-bound kernels 5-10% slower than the
reference model's on the H200 and 4-6% faster on the H100, its cuDNN attention at head dim 128
about 15% faster than the profile's attention lines. Each class's speed is its line seconds (the
transformers stream priced by the GPU's measured profile with in-step speeds of 1) over the traced
seconds, summed over the steps.
"""

from __future__ import annotations

__all__ = ["TRANSFORMERS_TRACED", "TRACED_SOURCES", "kernel_class", "transformers_class_seconds",
           "transformers_in_step_speeds"]

# Per runtime key: (config under tests/data/h200/hf, micro-batch, sequence, GEMM s, attention s,
# memory-bound s) of one traced step without recomputation (the optimizer's multi_tensor_apply
# kernels apart); kernel_class sorts the trace's kernel names. Attention enters only at head dim 128
# without a mask (Qwen3): Llama-3.2-1B's head dim 64 has its own speed, Gemma 2's sliding layers
# run masked (Runtime.attention_mask_slowdown).
TRANSFORMERS_TRACED = {
    "h200": (("llama-3.2-1b", 4, 2048, 0.07774, 0.01169, 0.0898),  # check-2026-11-27/trace.json
             ("qwen3-1.7b", 4, 2048, 0.10549, 0.01535, 0.1851),
             ("qwen3-0.6b", 8, 2048, 0.076, 0.02838, 0.25425),  # check-2026-11-27b/gpu_check.json traces
             ("gemma-2-2b", 2, 4096, 0.16584, 0.07428, 0.21237)),
    "hopper": (("llama-3.2-1b", 4, 2048, 0.07764, 0.01141, 0.09786),  # tests/data/h100/check-2026-11-27/trace.json
               ("qwen3-1.7b", 4, 2048, 0.10793, 0.01581, 0.20806)),
}
# the measured device profile each key's steps are priced with (autotune/data/devices)
TRACED_SOURCES = {"h200": "h200-measured.json", "hopper": "h100-sxm-measured.json"}
_CLUSTERS = {"h200": "dgx-h200", "hopper": "dgx-h100"}
_ATTENTION_HEAD_DIM = 128


def kernel_class(name: str) -> str:
    """A traced CUDA kernel's class: "attention" (cuDNN/flash SDPA), "gemm" (cuBLAS nvjet, CUTLASS,
    xmma), "optimizer" (the fused AdamW's multi_tensor_apply) or "memory" (everything else)."""
    low = name.lower()
    if any(tag in low for tag in ("sdpa", "fmha", "flash")):
        return "attention"
    if any(tag in low for tag in ("nvjet", "gemm", "cutlass", "xmma")):
        return "gemm"
    return "optimizer" if "multi_tensor_apply" in low else "memory"


def transformers_class_seconds(config: str, batch: int, seq_len: int, profile: str, key: str) -> dict[str, float]:
    """The transformers stream's fwd+bwd kernels of one step of ``config`` at ``batch`` x ``seq_len``,
    priced by ``profile``'s lines (in-step speeds 1), by class: {"gemm", "attention", "memory"} s."""
    from autotune.cost.compute import block_times
    from autotune.cost.runtime_kernels import runtime_cluster
    from autotune.graph.table import runtime_tables
    from autotune.spec.hf_config import model_from_hf_config
    from autotune.spec.resolve import resolve_cluster
    from autotune.spec.runtime import load_runtime
    from autotune.spec.workload import TrainingWorkload

    runtime = load_runtime("transformers")
    unit = ((key, 1.0),)
    runtime = runtime.with_changes(gemm_in_step_speed=unit, attention_in_step_speed=unit, memory_in_step_speed=unit)
    model = model_from_hf_config(config)
    device = runtime_cluster(resolve_cluster(_CLUSTERS[key], profile=profile), runtime).device
    tables = runtime_tables(model, TrainingWorkload(global_batch=batch, seq_len=seq_len), runtime)
    totals = {"gemm": 0.0, "attention": 0.0, "memory": 0.0}
    for block, count in (("layer", model.num_layers), ("embedding", 1), ("head", 1)):
        table = getattr(tables, block)
        times = block_times(table, device, "bf16", batch, 1, 1, False)
        for kind, seconds in zip(table.kinds, (times.fwd_ops_s + times.bwd_ops_s).reshape(-1)):
            cls = "gemm" if kind.startswith("gemm") else "attention" if kind == "attention" else "memory"
            totals[cls] += count * float(seconds)
    return totals


def transformers_in_step_speeds(devices_dir: str, configs_dir: str, key: str) -> dict[str, float]:
    """Line seconds over traced seconds per class, summed over TRANSFORMERS_TRACED[key] (attention
    over the steps at head dim 128 without a mask); ``configs_dir`` holds the steps' config.json files."""
    from pathlib import Path

    from autotune.graph.opstream import explicit_mask_share
    from autotune.spec.hf_config import model_from_hf_config

    line = {"gemm": 0.0, "attention": 0.0, "memory": 0.0}
    traced = dict(line)
    profile = str(Path(devices_dir) / TRACED_SOURCES[key])
    for name, batch, seq_len, gemm_s, attention_s, memory_s in TRANSFORMERS_TRACED[key]:
        config = str(Path(configs_dir) / f"{name}.json")
        priced = transformers_class_seconds(config, batch, seq_len, profile, key)
        model = model_from_hf_config(config)
        plain_attention = model.head_dim == _ATTENTION_HEAD_DIM and not explicit_mask_share(model, seq_len)
        for cls, seconds in (("gemm", gemm_s), ("attention", attention_s), ("memory", memory_s)):
            if cls == "attention" and not plain_attention:
                continue
            line[cls] += priced[cls]
            traced[cls] += seconds
    return {cls: line[cls] / traced[cls] for cls in line}
