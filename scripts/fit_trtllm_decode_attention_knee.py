"""Fit TensorRT-LLM's measured decode attention (aiconfigurator generation_attention_perf.parquet) with a
knee: the op's per-sequence work costs nothing until the GPU's SMs are full, then a fixed time a
sequence x KV head:

    time = latency + per_item * max(0, batch * kv_heads - knee_items) + kv_bytes * s_per_byte

The XQA / masked-MHA kernel runs a block per sequence and KV head; below a few hundred of them the
blocks run side by side on the 132-160 SMs and the op costs its latency and its K/V bytes, above that
every added block waits for a free SM. The tables show it directly: (time - latency - K/V bytes) / items
is 0-2 ns at 8-128 items and a flat 8-9 ns (B200, FP8 KV) from ~256 items to 16,384, whatever the head
count and head_dim. The straight line of fit_trtllm_decode_attention.py (batch 1-512, head_dim 128)
averages the two regimes, so it prices the batches of a maximum-throughput run (1,000-3,000 sequences
of GPT-OSS's 64 / 8 heads of 64) 35-58% fast. This fit takes head_dim 64 and 128, grouped-query shapes
without a window, batch 1-2048 and 64-8192 cached positions; knee_items on a grid of 8, latency and
per_item by least squares on relative error at each knee. s_per_byte is the device profile's stream
fit, given.

usage: python scripts/fit_trtllm_decode_attention_knee.py PARQUET MEM_S_PER_BYTE KV_DTYPE
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/src/aiconfigurator_core/
systems/data/<gpu>/attention/trtllm/1.3.0rc20/generation_attention_perf.parquet)"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
HEAD_DIMS = (64, 128)  # GPT-OSS, Llama / Qwen / Mistral


def load(path: str, kv_dtype: str) -> pd.DataFrame:
    d = pd.read_parquet(path)
    d = d[(d.kernel_source == "torch_flow") & d.head_dim.isin(HEAD_DIMS) & (d.kv_cache_dtype == kv_dtype)
          & (d.window_size == 0) & (d.isl == 1) & (d.num_key_value_heads < d.num_heads)
          & d.batch_size.between(1, 2048) & d.step.between(63, 8191)]
    d = d.groupby(["num_heads", "num_key_value_heads", "head_dim", "batch_size", "step"]).latency.mean().reset_index()
    items = d.batch_size * d.num_key_value_heads
    # step = the cached positions the query attends (collect_attn.py: step = input_len), plus its own
    kv_bytes = items * (d.step + 1) * 2 * d.head_dim * KV_BYTES[kv_dtype]
    return d.assign(t=d.latency * 1e-3, units=items, kv_bytes=kv_bytes)


def fit_at(d: pd.DataFrame, s_per_byte: float, knee: float) -> tuple[float, float, np.ndarray]:
    """(latency_s, per_item_s, relative errors) of least squared relative error at ``knee`` items."""
    t, rest = d.t.to_numpy(), d.kv_bytes.to_numpy() * s_per_byte
    over = np.maximum(d.units.to_numpy() - knee, 0.0)
    coef, *_ = np.linalg.lstsq(np.stack([1.0 / t, over / t], axis=1), 1.0 - rest / t, rcond=None)
    latency, per_item = (max(float(c), 0.0) for c in coef)
    return latency, per_item, (latency + per_item * over + rest) / t - 1.0


def main(argv: list[str]) -> None:
    path, s_per_byte, kv_dtype = argv[0], float(argv[1]), argv[2]
    d = load(path, kv_dtype)
    rms = {k: float(np.sqrt((fit_at(d, s_per_byte, k)[2] ** 2).mean())) for k in range(0, 1025, 8)}
    knee = min(rms, key=rms.get)
    latency, per_item, e = fit_at(d, s_per_byte, knee)
    print(f"{kv_dtype}: rows {len(d)}, knee {knee} items, latency {latency * 1e6:.2f} us, per sequence x KV head "
          f"{per_item * 1e9:.2f} ns, rms {rms[knee]:.3f} (no knee: {rms[0]:.3f}); {1.0 / s_per_byte / 1e12:.2f} TB/s")
    by_batch = pd.Series(e).groupby(pd.cut(d.batch_size, [0, 16, 64, 256, 512, 1024, 2048]).to_numpy(), observed=True)
    print("  mean error by batch:", ", ".join(f"{k.left + 1}-{k.right} {v:+.3f}" for k, v in by_batch.mean().items()))
    gpt_oss = pd.Series(e)[((d.num_heads == 64) & (d.num_key_value_heads == 8) & (d.head_dim == 64)).to_numpy()]
    print(f"  GPT-OSS's 64 / 8 heads of 64: mean {gpt_oss.mean():+.3f}, rms {np.sqrt((gpt_oss ** 2).mean()):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
