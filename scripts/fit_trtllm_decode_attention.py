"""Fit TensorRT-LLM's measured decode attention (aiconfigurator generation_attention_perf.parquet) to
the line cost/serving_step.py prices a decode-attention layer with under that engine:

    time = latency + per_kv_head * batch * kv_heads + kv_bytes * s_per_byte

kv_bytes = batch x cached positions x kv_heads x 2 (K, V) x head_dim x the KV dtype's bytes; s_per_byte
is the device profile's stream fit (given, not fitted), so latency (the op's kernels: QKV preprocessing
with RoPE and the KV append, then the XQA / masked-MHA kernel) and per_kv_head (each sequence's and
KV head's own work: its block table, Q, output, the append) are the two fitted numbers, least squares
on relative error. Rows: grouped-query shapes (fewer KV heads than query heads), head_dim 128, no
window, batch 1..512, 64..8192 cached positions. Prints the fit, its residual by query/KV heads, and
the residual of the generic pricing (a memory kernel's latency plus the bytes at the stream fit over
the profile's kernel_efficiency) for comparison.

usage: python scripts/fit_trtllm_decode_attention.py PARQUET MEM_S_PER_BYTE KERNEL_EFFICIENCY [KV_DTYPE]
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/src/aiconfigurator_core/
systems/data/<gpu>/attention/trtllm/<version>/generation_attention_perf.parquet)"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

MEM_LATENCY_S = 2.5e-6  # the profiles' regressions.memory latency (the generic pricing's floor)
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}


def load(path: str, kv_dtype: str) -> pd.DataFrame:
    d = pd.read_parquet(path)
    d = d[(d.head_dim == 128) & (d.kv_cache_dtype == kv_dtype) & (d.window_size == 0) & (d.isl == 1)
          & (d.num_key_value_heads < d.num_heads) & d.batch_size.between(1, 512) & d.step.between(63, 8191)]
    d = d.groupby(["num_heads", "num_key_value_heads", "batch_size", "step"]).latency.mean().reset_index()
    items = d.batch_size * d.num_key_value_heads
    # step = the cached positions the query attends (collect_attn.py: step = input_len), plus its own
    kv_bytes = items * (d.step + 1) * 2 * 128 * KV_BYTES[kv_dtype]
    return d.assign(t=d.latency * 1e-3, pairs=items, kv_bytes=kv_bytes)


def fit(d: pd.DataFrame, s_per_byte: float) -> tuple[float, float]:
    """(latency_s, seconds per sequence x KV head) of least squared relative error (linear in both)."""
    rest = d.kv_bytes * s_per_byte
    a = np.stack([1.0 / d.t, d.pairs / d.t], axis=1)
    coef, *_ = np.linalg.lstsq(a, (1.0 - rest / d.t).to_numpy(), rcond=None)
    return float(max(coef[0], 0.0)), float(max(coef[1], 0.0))


def report(d: pd.DataFrame, predicted: pd.Series, label: str) -> None:
    e = predicted / d.t - 1.0
    print(f"{label}: rows {len(d)}, mean {e.mean():+.3f}, rms {np.sqrt((e ** 2).mean()):.3f}")
    for (h, kv), g in d.assign(e=e).groupby(["num_heads", "num_key_value_heads"]):
        if (h, kv) in ((8, 1), (16, 2), (32, 8), (64, 8)):  # Llama 3 70B at TP 8/4, 8B at TP 1, 70B at TP 1
            print(f"  heads {h}/{kv}: mean {g.e.mean():+.3f} rms {np.sqrt((g.e ** 2).mean()):.3f}")


def main(argv: list[str]) -> None:
    path, s_per_byte, efficiency = argv[0], float(argv[1]), float(argv[2])
    kv_dtype = argv[3] if len(argv) > 3 else "bfloat16"
    d = load(path, kv_dtype)
    latency, per_item = fit(d, s_per_byte)
    print(f"fit: latency {latency * 1e6:.2f} us, per sequence x KV head {per_item * 1e9:.2f} ns, "
          f"{1.0 / s_per_byte / 1e12:.2f} TB/s (the stream fit)")
    report(d, latency + per_item * d.pairs + d.kv_bytes * s_per_byte, "fit")
    report(d, (MEM_LATENCY_S + d.kv_bytes * s_per_byte) / efficiency, "generic pricing")


if __name__ == "__main__":
    main(sys.argv[1:])
