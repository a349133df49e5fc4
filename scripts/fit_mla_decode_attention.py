"""Fit an engine's measured MLA decode attention (aiconfigurator generation_mla_perf.parquet) to the
line cost/serving_step.py prices an MLA decode layer with on one GPU:

    time = latency + s_per_request * batch + s_per_position * batch * (cached positions + 1)

and, with --context, its prompt (context) attention (context_mla_perf.parquet: batch prompts of isl
tokens, nothing cached; batch <= 16, isl >= 128) to

    time = latency + s_per_token * batch * isl + s_per_pair * batch * isl * (isl + 1) / 2

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

The context op (collect_mla.py context_only: TensorRT-LLM's MLA context FMHA on the expanded heads, Q/K
192 = 128 + rope 64, V 128, causal) does 2 x (192 + 128) FLOPs per head and causal pair; its per-token
term holds each token's own work (the rope, the KV-cache append of its latent).

usage: python scripts/fit_mla_decode_attention.py [--context] [--kernel=SOURCE] GPU_KEY PARQUET [HEADS ...]
prints the [GPU key, KV dtype, heads, latency_s, s_per_request, s_per_position] rows
(serving.mla_decode_attention), with --context [GPU key, KV dtype, heads, latency_s, s_per_token,
s_per_pair] (serving.mla_prefill_attention), and each fit's residual. Needs pandas + pyarrow."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
KV_DTYPE = {"bfloat16": "bf16", "fp8": "fp8"}
LATENT, ROPE = 512, 64  # DeepSeek-V3 config.json kv_lora_rank, qk_rope_head_dim (the collector's Scenario)
# the prompt rows fitted: up to 16 prompts of 128 tokens and more. Wider batches of short prompts cost a
# per-prompt term this line lacks (batch 256: -43% mean, isl 1-32: -30..-57% over the whole grid), which a
# step of chunked prefill (a few chunks of hundreds to thousands of tokens) does not reach
CONTEXT_MAX_BATCH, CONTEXT_MIN_ISL = 16, 128
QK, V = 192, 128  # DeepSeek-V3 qk_nope_head_dim + qk_rope_head_dim, v_head_dim: the context kernel's head sizes


def load(path: str, context: bool, kernel: str = "") -> pd.DataFrame:
    """Median latency per KV dtype, heads a GPU runs and shape (of ``kernel``'s rows where a table holds
    several kernel sources); ``per``: the sequences (decode) or prompt tokens (context), ``work``: the
    cached positions read (decode) or causal pairs (context)."""
    d = pd.read_parquet(path)
    d = d[d.kernel_source == kernel] if kernel else d
    d = d.rename(columns={"num_heads": "heads"})  # the collectors log the heads a GPU runs (total / tp_size)
    d = d.groupby(["kv_cache_dtype", "heads", "batch_size", "isl", "step"]).latency.median().reset_index()
    if context:  # a serving step's prompt chunks: a few long ones (the grid's short, wide corner has a per-prompt cost)
        d = d[(d.batch_size <= CONTEXT_MAX_BATCH) & (d.isl >= CONTEXT_MIN_ISL)]
        return d.assign(t=d.latency * 1e-3, per=d.batch_size * d.isl, work=d.batch_size * d.isl * (d.isl + 1.0) / 2)
    return d.assign(t=d.latency * 1e-3, per=d.batch_size * 1.0, work=d.batch_size * (d.step + 1.0))


def fit(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(latency_s, s per sequence or token, s per position or pair) of least squared relative error, and the errors."""
    a = np.stack([np.ones(len(d)), d.per.to_numpy(float), d.work.to_numpy(float)], axis=1)
    coef, *_ = np.linalg.lstsq(a / d.t.to_numpy()[:, None], np.ones(len(d)), rcond=None)
    coef = np.maximum(coef, 0.0)
    return coef, a @ coef / d.t.to_numpy() - 1.0


def main(argv: list[str]) -> None:
    kernel = next((a.split("=", 1)[1] for a in argv if a.startswith("--kernel=")), "")
    argv = [a for a in argv if not a.startswith("--kernel=")]
    context = argv[0] == "--context"
    gpu, path = argv[context], argv[context + 1]
    wanted = [int(h) for h in argv[context + 2:]] or [8, 16, 32, 64, 128]
    d = load(path, context, kernel)
    for (kv, heads), g in d.groupby(["kv_cache_dtype", "heads"]):
        if heads not in wanted:
            continue
        coef, e = fit(g)
        if context:
            rate = f"a pair: {2.0 * heads * (QK + V) / coef[2] / 1e12:.0f} TFLOPS"
        else:
            rate = (f"a position: {(LATENT + ROPE) * KV_BYTES[kv] / coef[2] / 1e12:.2f} TB/s or "
                    f"{2.0 * heads * (2 * LATENT + ROPE) / coef[2] / 1e12:.0f} TFLOPS")
        print(f'["{gpu}", "{KV_DTYPE[kv]}", {heads}, {coef[0]:.3e}, {coef[1]:.3e}, {coef[2]:.3e}],'
              f"  # rows {len(g)} mean {e.mean():+.3f} rms {np.sqrt((e ** 2).mean()):.3f}; {rate}")


if __name__ == "__main__":
    main(sys.argv[1:])
