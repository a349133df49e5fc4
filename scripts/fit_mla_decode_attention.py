"""Fit an engine's measured MLA decode attention (aiconfigurator generation_mla_perf.parquet) to the
line cost/serving_step.py prices an MLA decode layer with on one GPU:

    time = latency + s_per_request * batch + s_per_position * batch * (cached positions + 1)

per KV dtype and query heads a GPU runs (DeepSeek-V3's 128 over its attention TP: 128 under DP
attention, 16 at TP 8). The op measured is the absorbed-form decode (aiconfigurator @095f58a5
collector/trtllm/collect_mla.py: mla_rope_generation then TrtllmAttention.forward generation_only,
FlashMLA on SM90, TRTLLM-Gen's MLA kernels on SM100/103; collector/sglang/collect_mla.py: SGLang
0.5.14's default DeepSeek backend, fa3 on SM90, trtllm_mla on SM100/103), one latent of 512 + rope 64
a cached position shared by every head. latency: the kernels' floor; s_per_request: a sequence's
own work (its Q's rope and quantization, its block table, the split-KV combine); s_per_position: a
cached latent's read or its heads' FLOPs, whichever the kernel is bound by (the fit prints the
bandwidth and FLOP rate that cost means). Least squares on relative error, rows batch 1..1024 and
1..131071 cached positions (the table's whole grid).

usage: python scripts/fit_mla_decode_attention.py GPU_KEY PARQUET [HEADS ...]
prints the [GPU key, KV dtype, heads, latency_s, s_per_request, s_per_position] rows
(serving.mla_decode_attention) and each fit's residual. Needs pandas + pyarrow."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
KV_DTYPE = {"bfloat16": "bf16", "fp8": "fp8"}
LATENT, ROPE = 512, 64  # DeepSeek-V3 config.json kv_lora_rank, qk_rope_head_dim (the collector's Scenario)


def load(path: str) -> pd.DataFrame:
    d = pd.read_parquet(path)
    d = d.rename(columns={"num_heads": "heads"})  # the collectors log the heads a GPU runs (total / tp_size)
    d = d.groupby(["kv_cache_dtype", "heads", "batch_size", "step"]).latency.median().reset_index()
    return d.assign(t=d.latency * 1e-3, positions=d.batch_size * (d.step + 1.0))


def fit(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(latency_s, s_per_request, s_per_position) of least squared relative error, and the errors."""
    a = np.stack([np.ones(len(d)), d.batch_size.to_numpy(float), d.positions.to_numpy(float)], axis=1)
    coef, *_ = np.linalg.lstsq(a / d.t.to_numpy()[:, None], np.ones(len(d)), rcond=None)
    coef = np.maximum(coef, 0.0)
    return coef, a @ coef / d.t.to_numpy() - 1.0


def main(argv: list[str]) -> None:
    gpu, path = argv[0], argv[1]
    wanted = [int(h) for h in argv[2:]] or [8, 16, 32, 64, 128]
    d = load(path)
    for (kv, heads), g in d.groupby(["kv_cache_dtype", "heads"]):
        if heads not in wanted:
            continue
        coef, e = fit(g)
        tbps = (LATENT + ROPE) * KV_BYTES[kv] / coef[2] / 1e12
        tflops = 2.0 * heads * (2 * LATENT + ROPE) / coef[2] / 1e12
        print(f'["{gpu}", "{KV_DTYPE[kv]}", {heads}, {coef[0]:.3e}, {coef[1]:.3e}, {coef[2]:.3e}],'
              f"  # rows {len(g)} mean {e.mean():+.3f} rms {np.sqrt((e ** 2).mean()):.3f};"
              f" a position: {tbps:.2f} TB/s or {tflops:.0f} TFLOPS")


if __name__ == "__main__":
    main(sys.argv[1:])
