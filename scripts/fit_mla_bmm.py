"""Fit an engine's measured absorbed-MLA BMMs (aiconfigurator mla_bmm_perf.parquet) to the line
cost/serving_mla_bmm.py prices them with, per layer on one GPU:

    time = latency + s_per_token * tokens

for the two BMMs of a decode layer together (mla_gen_pre: q_nope x W_UK, tokens x heads x 128 -> 512;
mla_gen_post: the attention's latent output x W_UV, 512 -> 128), per BMM dtype and heads a GPU runs.
Rows: ai-dynamo/aiconfigurator @095f58a5 collector/{trtllm,sglang}/collect_mla_bmm.py (TensorRT-LLM:
its bmm_out op, FP8 as trtllm_fp8_block_scaling_bmm_out on SM90 and dequantized to BF16 on SM100/103;
SGLang: torch.bmm in BF16, sgl_kernel bmm_fp8 in FP8), tokens 1..8192 (the range both BMMs were timed
at). latency: the two launches' floor with the heads' weights read; s_per_token: a token's FLOPs
(2 x 2 x heads x 128 x 512) at the rate the BMMs reach (printed). Least squares on relative error,
like scripts/fit_mla_decode_attention.py.

usage: python scripts/fit_mla_bmm.py GPU_KEY PARQUET [HEADS ...]
prints [GPU key, BMM dtype, heads, latency_s, s_per_token] rows and each fit's residual. Needs pandas + pyarrow."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

DTYPE = {"bfloat16": "bf16", "fp8": "fp8"}
NOPE, LATENT = 128, 512  # DeepSeek-V3 config.json qk_nope_head_dim (= v_head_dim), kv_lora_rank


def load(path: str) -> pd.DataFrame:
    """Per BMM dtype, heads and tokens: the median latency of pre plus post (seconds), where both were timed."""
    d = pd.read_parquet(path)
    d = d.groupby(["bmm_dtype", "num_heads", "num_tokens", "op_name"]).latency.median().unstack("op_name").dropna()
    d = d.reset_index()
    return d.assign(t=(d.mla_gen_pre + d.mla_gen_post) * 1e-3)


def fit(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(latency_s, s per token) of least squared relative error, and the errors."""
    a = np.stack([np.ones(len(d)), d.num_tokens.to_numpy(float)], axis=1)
    coef, *_ = np.linalg.lstsq(a / d.t.to_numpy()[:, None], np.ones(len(d)), rcond=None)
    coef = np.maximum(coef, 0.0)
    return coef, a @ coef / d.t.to_numpy() - 1.0


def main(argv: list[str]) -> None:
    gpu, path = argv[0], argv[1]
    wanted = [int(h) for h in argv[2:]] or [8, 16, 32, 64, 128]
    for (dtype, heads), g in load(path).groupby(["bmm_dtype", "num_heads"]):
        if heads not in wanted:
            continue
        coef, e = fit(g)
        small = g.num_tokens <= 64
        tflops = 2.0 * 2 * heads * NOPE * LATENT / coef[1] / 1e12 if coef[1] else float("inf")
        print(f'["{gpu}", "{DTYPE[dtype]}", {heads}, {coef[0]:.3e}, {coef[1]:.3e}],'
              f"  # rows {len(g)} mean {e.mean():+.3f} rms {np.sqrt((e ** 2).mean()):.3f}"
              f" (<=64 tokens rms {np.sqrt((e[small] ** 2).mean()):.3f}); {tflops:.0f} TFLOPS")


if __name__ == "__main__":
    main(sys.argv[1:])
