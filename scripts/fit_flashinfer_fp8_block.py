"""Fit FlashInfer's groupwise FP8 GEMM on B200 (gemm_fp8_nt_groupwise, backend "trtllm": what SGLang 0.5.12's
fp8_utils.py _dispatch_auto_backend runs for a 128x128-block FP8 linear on SM100 when DeepGEMM is off) from the
published timings that measure it, and set the fit beside the DeepGEMM linear fit the B200 profile already has
(regressions.serving_gemm_sglang.fp8_block).

The timings (microseconds, median; the activation already quantized, so no per-token-group quantization inside):
* sgl-project/sglang pull request #13528 ("[NVIDIA] Add fp8 gemm benchmark on blackwell", merged), the output of
  benchmark/kernels/deepseek/benchmark_deepgemm_fp8_gemm_blackwell.py --tp-size 4 on B200, column 'Flashinfer'
  (the script calls gemm_fp8_nt_groupwise(..., backend="trtllm") on sglang_per_token_group_quant_fp8's
  column-major scales, as SGLang's linear does). The pull request's text shows the rows of two weight shapes.
* flashinfer-ai/flashinfer issue #2146 (reproduced in NVIDIA/cutlass issue #2923), column 'FP8 TRT-LLM': the same
  call on B200 timed with CUPTI, L2 flushed, N 2048 x K 1024.

What the rows show: the kernel tiles the output 128 weight rows by 32 tokens (swap-AB, built for decode: the N 24576
rows step at 32 -> 64 tokens) and loops each tile over K; with B200's 148 SMs the N 576 rows at M 256 / 1024 / 2048 /
4096 run 1 / 2 / 3 / 5 waves of tiles and take 16.4 / 28.7 / 41.2 / 63.5 us: a first wave, then ~12 us a wave, about
0.73 PFLOP/s at many waves against the DeepGEMM linear's 2.91. CUPTI at K 1024: 5.1 us one wave, 8.7 two. Where the
weight does not fit in L2 (N 24576 x K 7168, 176 MB against 126 MB) the kernel reads it again from HBM for every 32
tokens (64 -> 2048 tokens: those passes over the time are 5.0 -> 6.9 TB/s, the HBM rate).

The fit (cost/flashinfer_fp8_block.py): a wave's seconds linear in K through the two K measured, the first wave
(K 1024: CUPTI M 8..256 mean; K 7168: PR #13528 N 576 M 8..256 mean) and each further one (K 1024: CUPTI M 512 less
its first wave; K 7168: least squares of the N 576 rows M 1024..4096 over their waves past the first), the HBM
passes where the weight outgrows L2. A one-wave GEMM (a decode's) stays at the DeepGEMM linear's measured time
there, not the first-wave fit (the rows at few tokens time whichever of host or GPU is longer).

usage: python scripts/fit_flashinfer_fp8_block.py
"""

from __future__ import annotations

import numpy as np

# (M, N, K, microseconds): sglang PR #13528, --tp-size 4, column 'Flashinfer' (B200)
PR13528 = [
    (8, 576, 7168, 16.640), (16, 576, 7168, 16.288), (32, 576, 7168, 16.416), (64, 576, 7168, 16.352),
    (128, 576, 7168, 16.384), (256, 576, 7168, 16.384), (1024, 576, 7168, 28.704), (2048, 576, 7168, 41.216),
    (4096, 576, 7168, 63.488),
    (8, 24576, 7168, 47.136), (16, 24576, 7168, 47.104), (32, 24576, 7168, 47.392), (64, 24576, 7168, 69.920),
    (128, 24576, 7168, 125.216), (256, 24576, 7168, 223.520), (1024, 24576, 7168, 826.192),
    (2048, 24576, 7168, 1632.544),
]
# (M, N, K, microseconds): flashinfer issue #2146 / cutlass issue #2923, column 'FP8 TRT-LLM' (B200, CUPTI)
CUPTI = [(8, 2048, 1024, 5.15), (32, 2048, 1024, 5.22), (64, 2048, 1024, 4.96), (128, 2048, 1024, 4.99),
         (256, 2048, 1024, 5.09), (512, 2048, 1024, 8.67)]
MEM_S_PER_BYTE = 1.481e-13  # the B200 profile's regressions.memory (6.75 TB/s)
L2_BYTES = 126e6  # the profile's L2 tier (Blackwell whitepaper: two dies of 63 MB)
SMS = 148  # B200's streaming multiprocessors
TILE_N, TILE_M = 128, 32  # the output tile: weight rows by tokens


def waves(m: int, n: int) -> int:
    return -(-(-(-n // TILE_N) * -(-m // TILE_M)) // SMS)


def wave_fits() -> tuple[tuple[float, float], tuple[float, float]]:
    """((latency, seconds per K) of the first wave, (the same) of each further one)."""
    small = [(k, t) for m, n, k, t in PR13528 + CUPTI if waves(m, n) == 1 and n * k < L2_BYTES]
    first = {k: np.mean([t for kk, t in small if kk == k]) * 1e-6 for k in sorted({k for k, _ in small})}
    more = {}
    for k in first:
        rows = [(waves(m, n) - 1, t * 1e-6 - first[k]) for m, n, kk, t in PR13528 + CUPTI
                if kk == k and waves(m, n) > 1 and n * k < L2_BYTES]
        more[k] = sum(w * d for w, d in rows) / sum(w * w for w, _ in rows)
    (k0, k1) = sorted(first)
    line = lambda v: ((v[k0] * k1 - v[k1] * k0) / (k1 - k0), (v[k1] - v[k0]) / (k1 - k0))  # noqa: E731
    return line(first), line(more)


def priced_s(m: int, n: int, k: int, first, more) -> float:
    gemm = first[0] + k * first[1] + (waves(m, n) - 1) * (more[0] + k * more[1])
    weights = n * k * (1.0 + 4.0 / (128 * 128))
    passes = -(-m // TILE_M) * weights * MEM_S_PER_BYTE if weights > L2_BYTES else 0.0
    return max(gemm, passes)


def main() -> None:
    first, more = wave_fits()
    print(f"first wave {first[0] * 1e6:.2f} us + {first[1] * 1e9:.3f} ns per K; "
          f"each further wave {more[0] * 1e6:.2f} us + {more[1] * 1e9:.3f} ns per K")
    print(" source      M      N      K  waves  measured_us  fit_us  err%")
    for name, rows in (("pr13528", PR13528), ("cupti", CUPTI)):
        for m, n, k, t in rows:
            fit = priced_s(m, n, k, first, more) * 1e6
            print(f"{name:8s} {m:6d} {n:6d} {k:6d} {waves(m, n):6d} {t:11.1f} {fit:7.1f} {100 * (fit / t - 1):+5.0f}")
    print(f"many waves: {2.0 * TILE_M * TILE_N * 7168 * SMS / (more[0] + 7168 * more[1]) / 1e12:.0f} TFLOP/s at K 7168")


if __name__ == "__main__":
    main()
