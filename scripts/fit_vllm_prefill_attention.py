"""Fit vLLM's measured prompt (context) attention (aiconfigurator context_attention_perf.parquet) to the
line cost/serving_step.py prices a prompt-attention layer with:

    time = latency + causal FLOPs x s_per_flop

causal FLOPs = batch x heads x 4 x head_dim x isl (isl + 1) / 2 (QK and PV over the causal pairs, no
cached prefix: the collector's step 0). latency: the median op time of one one-token prompt (the
kernels' floor); s_per_flop: the median of (time - latency) / FLOPs over rows of at least 2^26 pairs
(the kernel's rate, not its launch; a median, as a few rows in the tables are 3-10x their neighbours);
BF16 Q/K/V, a KV-cache dtype as given. Prints the fit, its residual by isl, and the rate the device
profile's generic fit gives over its kernel_efficiency.

--head-dim=N: only the rows of that head_dim (tables holding several). --kernel-source=NAME / --attn-dtype=D: only the
rows of that kernel_source / attn_dtype (default bfloat16); TensorRT-LLM's table holds its TRTLLM backend
("torch_flow") beside FlashInfer's, and an FP8 model's prompts run FP8 context FMHA (attn_dtype fp8 with an FP8 KV
cache: collector/trtllm/collect_attn.py use_fp8_context_fmha @095f58a5). --per-token: fit a third term, seconds per
prompt token x query width (heads x head_dim), beside the FLOPs: latency the one-token floor, then the two slopes by
least squares on the relative error over the rows of at least 512-token prompts and 2,048 tokens a call (the rate
ramps with the prompt, which one FLOP rate misses: the Q/K/V loads, RoPE and the KV-cache write grow with the tokens). --head-dim-ratio=PARQUET2: also print
FA3's rate at head_dim 64 over 128 in PARQUET2 (a release whose table has both, 0.24.0), the median over
the rows of both with the same batch, isl and heads (at least 2^26 pairs a head).

usage: python scripts/fit_vllm_prefill_attention.py PARQUET DEVICE_S_PER_FLOP KERNEL_EFFICIENCY [KV_DTYPE]
           [--head-dim=N] [--head-dim-ratio=PARQUET2] [--kernel-source=NAME] [--attn-dtype=D] [--per-token]
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/src/aiconfigurator_core/
systems/data/<gpu>/attention/vllm/0.14.0/context_attention_perf.parquet, collected by
collector/vllm/collect_attn.py: the FlashAttention backend's impl.forward with its KV-cache write)"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

MIN_PAIRS = 2 ** 26  # batch x isl^2 / 2 a head: below it a row is launch- and tail-bound


def load(path: str, kv_dtype: str, head_dim: int = 0, kernel_source: str = "", attn_dtype: str = "bfloat16") -> pd.DataFrame:
    d = pd.read_parquet(path)
    d = d[(d.kv_cache_dtype == kv_dtype) & (d.attn_dtype == attn_dtype) & (d.step == 0)]
    if head_dim:
        d = d[d.head_dim == head_dim]
    if kernel_source:
        d = d[d.kernel_source == kernel_source]
    if "window_size" in d:  # full causal attention only (TensorRT-LLM's table also times sliding windows)
        d = d[d.window_size == 0]
    d = d.groupby(["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"]).latency.mean().reset_index()
    pairs = d.batch_size * d.isl * (d.isl + 1) / 2
    flops = pairs * d.num_heads * 4 * d.head_dim
    return d.assign(t=d.latency * 1e-3, flops=flops, pairs=pairs)


def fit(d: pd.DataFrame) -> tuple[float, float]:
    """(latency_s, seconds per FLOP): the one-token floor, then the median rate of the large rows."""
    latency = float(d[(d.isl == 1) & (d.batch_size == 1)].t.median())
    big = d[d.pairs >= MIN_PAIRS]
    return latency, float(((big.t - latency) / big.flops).median())


def fit_per_token(d: pd.DataFrame) -> tuple[float, float, float]:
    """(latency_s, seconds per FLOP, seconds per token x query width): least squares on (model / time - 1)."""
    latency = float(d[(d.isl == 1) & (d.batch_size == 1)].t.median())
    rows = d[(d.isl >= 512) & (d.batch_size * d.isl >= 2048)]
    width = rows.batch_size * rows.isl * rows.num_heads * rows.head_dim
    a = np.vstack([rows.flops / rows.t, width / rows.t]).T
    (per_flop, per_width), *_ = np.linalg.lstsq(a, (1.0 - latency / rows.t).to_numpy(), rcond=None)
    return latency, float(per_flop), float(per_width)


def report_per_token(d: pd.DataFrame) -> None:
    latency, spf, spw = fit_per_token(d)
    rows = d[(d.isl >= 512) & (d.batch_size * d.isl >= 2048)]
    e = (latency + rows.flops * spf + rows.batch_size * rows.isl * rows.num_heads * rows.head_dim * spw) / rows.t - 1.0
    print(f"per-token fit: latency {latency * 1e6:.1f} us, {spf:.4e} s/FLOP = {1e-12 / spf:.0f} TFLOP/s, {spw:.4e} s per "
          f"token x query width; rows {len(rows)}, mean {e.mean():+.3f}, rms {np.sqrt((e ** 2).mean()):.3f}")
    for isl, g in rows.assign(e=e).groupby("isl"):
        print(f"  isl {isl:6d}: rows {len(g):4d} median {g.e.median():+.3f} rms {np.sqrt((g.e ** 2).mean()):.3f}")


def head_dim_ratio(path: str, kv_dtype: str) -> float:
    """FA3's FLOP rate at head_dim 64 over 128 on the same prompts (the median of the paired rows)."""
    d = pd.read_parquet(path)
    d = d[(d.kernel_source == "vllm_flash_attn_fa3") & (d.kv_cache_dtype == kv_dtype) & (d.step == 0)]
    d = d.assign(rate=d.batch_size * d.isl * (d.isl + 1) / 2 * d.num_heads * 4 * d.head_dim / d.latency)
    d = d[d.batch_size * d.isl * (d.isl + 1) / 2 >= MIN_PAIRS]
    keys = ["batch_size", "isl", "num_heads", "num_key_value_heads"]
    rate = {h: d[d.head_dim == h].groupby(keys).rate.median() for h in (64, 128)}
    return float((rate[64] / rate[128]).dropna().median())


def main(argv: list[str]) -> None:
    flags = {k: v for k, _, v in (a[2:].partition("=") for a in argv if a.startswith("--"))}
    argv = [a for a in argv if not a.startswith("--")]
    path, device_spf, efficiency = argv[0], float(argv[1]), float(argv[2])
    kv_dtype = argv[3] if len(argv) > 3 else "bfloat16"
    d = load(path, kv_dtype, int(flags.get("head-dim", 0)), flags.get("kernel-source", ""),
             flags.get("attn-dtype", "bfloat16"))
    if "per-token" in flags:
        report_per_token(d)
        return
    big = d[d.pairs >= MIN_PAIRS]
    latency, spf = fit(d)
    e = (latency + big.flops * spf) / big.t - 1.0
    print(f"fit ({kv_dtype} KV): latency {latency * 1e6:.1f} us, {spf:.4e} s/FLOP = {1e-12 / spf:.0f} TFLOP/s; "
          f"rows {len(big)}, mean {e.mean():+.3f}, median {e.median():+.3f}, rms {np.sqrt((e ** 2).mean()):.3f}")
    for isl, g in big.assign(e=e).groupby("isl"):
        print(f"  isl {isl:6d}: rows {len(g):4d} median {g.e.median():+.3f} rms {np.sqrt((g.e ** 2).mean()):.3f}, "
              f"achieved {np.median(g.flops / g.t) / 1e12:.0f} TFLOP/s (median)")
    print(f"device fit over kernel_efficiency: {efficiency / device_spf / 1e12:.0f} TFLOP/s "
          f"(measured rate {device_spf / efficiency / spf:.2f}x it)")
    if "head-dim-ratio" in flags:
        ratio = head_dim_ratio(flags["head-dim-ratio"], kv_dtype)
        print(f"head_dim 64 over 128: {ratio:.3f} -> {spf / ratio:.4e} s/FLOP at head_dim 64")


if __name__ == "__main__":
    main(sys.argv[1:])
