"""Fit TensorRT-LLM's measured prompt (context) attention with FP8 context FMHA to the line a serving preset's
``prefill_attention`` rows price a prompt-attention layer with (cost/serving_attention.py):

    time = latency + causal FLOPs x s_per_flop

scripts/fit_vllm_prefill_attention.py's loader and fit (causal FLOPs = batch x heads x 4 x head_dim x isl (isl + 1)
/ 2, no cached prefix; latency the median one-token op time; s_per_flop the median of (time - latency) / FLOPs
over rows of at least 2^26 causal pairs a head), on the rows of TensorRT-LLM's own attention op (kernel_source
torch_flow, the TRTLLM backend: the fmha_v2 context kernels the TensorRT plugin's context FMHA runs) with FP8
Q/K/V (attn_dtype fp8: ``use_fp8_context_fmha``) and an FP8 KV cache, for one head_dim. Prints one preset row
per table: [gpu, head_dim, latency_s, s_per_flop], with the fit's residual by isl.

usage: python scripts/fit_trtllm_prefill_attention.py GPU=PARQUET [GPU=PARQUET ...] [--head-dim=128]
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/src/aiconfigurator_core/systems/
data/<gpu>/attention/trtllm/1.3.0rc20/context_attention_perf.parquet, collected by collector/trtllm/collect_attn.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_vllm_prefill_attention import MIN_PAIRS, fit, load  # noqa: E402  (the one loader and fit of both engines)


def main(argv: list[str]) -> None:
    head_dim = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--head-dim=")), 128)
    for arg in (a for a in argv if not a.startswith("--")):
        gpu, path = arg.split("=", 1)
        d = load(path, "fp8", head_dim, kernel_source="torch_flow", attn_dtype="fp8")
        latency, spf = fit(d)
        rel = (latency + d.flops * spf) / d.t - 1.0
        by_isl = pd.Series(rel.values, index=d.isl.values).groupby(level=0).median()
        big = d.pairs >= MIN_PAIRS
        print(f'["{gpu}", {head_dim}, {latency:.3e}, {spf:.4e}],  # {len(d)} rows, {int(big.sum())} fitted: '
              f"{1e-12 / spf:.0f} TFLOP/s, rms {100 * float(np.sqrt((rel[big] ** 2).mean())):.0f}% over them; "
              + ", ".join(f"{int(i)}: {100 * v:+.0f}%" for i, v in by_isl.items() if i in (512, 1024, 2048, 4096, 8192, 16384)))


if __name__ == "__main__":
    main(sys.argv[1:])
