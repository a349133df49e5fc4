"""Derive the V100 profiles' ``attention`` fit: Megatron's unfused attention priced per fused-kernel FLOP.

Volta has no FlashAttention (it needs sm80+), so Megatron-LM of 2019-2021 ran attention unfused:
QK^T over the full s x s scores (a batched GEMM), a scale-mask-softmax that reads and writes the
scores, and the product with V. Plans priced with ``attention_impl="flash"`` (every modern row,
calibrate/modern.py) see one ``attention`` operator with the causal half of those FLOPs. This
script prices the unfused operators of graph/operators.py with the device's own GEMM and memory
fits (forward + backward, one layer, micro-batch 1 and 8, no dropout) and writes the fit that makes
the fused operator cost the same: ``time = latency + flops_executed x seconds_per_flop`` at head
dim 128, and the rate at head dim 64 relative to it (``attention_head_dim_64_speed``). Run:

    python scripts/v100_unfused_attention.py autotune/data/devices/v100-sxm3-32gb.toml
"""

from __future__ import annotations

import sys

import numpy as np

from autotune.cost.compute import block_times
from autotune.graph.operators import _attention_ops
from autotune.graph.table import OpTable
from autotune.spec.hardware_data import load_device
from autotune.spec.model import ModelSpec

SEQ = 1024  # GPT-2 / Megatron-LM 2019 sequence length
HEADS = 16


def _probe(head_dim: int) -> ModelSpec:
    return ModelSpec(name="probe", num_layers=1, hidden_size=HEADS * head_dim, num_heads=HEADS,
                     num_kv_heads=HEADS, ffn_hidden_size=4 * HEADS * head_dim, ffn_activation="gelu",
                     vocab_size=1024, max_seq_len=SEQ, tied_embeddings=True, dropout=False)


def _attention_s(device, head_dim: int, impl: str, micro_batch: int) -> float:
    """Seconds of one layer's attention core (``impl`` operators), forward + backward, fp16."""
    table = OpTable.from_operators(_attention_ops(_probe(head_dim), SEQ, 2, impl))
    times = block_times(table, device, "fp16", micro_batch, 1, 1, False)
    return float(np.sum(times.fwd_ops_s) + np.sum(times.bwd_ops_s)) * device.kernel_efficiency


def fit(device, head_dim: int) -> tuple[float, float]:
    """(latency_s, seconds_per_flop) of the unfused operators' time per FLOP of the fused operator
    (forward + backward FLOPs as the cost model counts them for it), from micro-batches 1 and 8."""
    fused = OpTable.from_operators(_attention_ops(_probe(head_dim), SEQ, 2, "flash"))
    flops = float(np.sum(fused.flops * (1.0 + fused.bwd_flops_factor)))  # per sequence
    t1, t8 = _attention_s(device, head_dim, "unfused", 1), _attention_s(device, head_dim, "unfused", 8)
    spf = (t8 - t1) / (7.0 * flops)
    launches = float(np.sum(fused.kernels + fused.bwd_kernels))  # the fused op pays its latency per launch
    return max(0.0, (t1 - spf * flops) / launches), spf


def main(path: str) -> None:
    base = load_device(path)
    device = base.with_changes(compute={k: v for k, v in base.compute.items() if k[0] != "attention"})
    lat128, spf128 = fit(device, 128)
    _, spf64 = fit(device, 64)
    _, spf96 = fit(device, 96)
    print(f"head dim 128: latency_s = {lat128:.3g}, seconds_per_flop = {spf128:.4g} ({1 / spf128 / 1e12:.1f} TFLOP/s)")
    print(f"head dim 96: {1 / spf96 / 1e12:.1f} TFLOP/s; head dim 64: {1 / spf64 / 1e12:.1f} TFLOP/s")
    print(f"attention_head_dim_64_speed = {spf128 / spf64:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "autotune/data/devices/v100-sxm3-32gb.toml")
