"""Fit an engine's measured NVFP4 linear (aiconfigurator gemm_perf.parquet, nvfp4 rows) to the roofline
cost/serving_step.py prices a GEMM with: max(latency + FLOPs * s/FLOP, memory latency + bytes * s/byte),
bytes = BF16 input and output + 4.5-bit weights, least squares on relative error. Prints the fit, the
residual by M, and the TensorRT-LLM fit's error on the same rows (how far the engines differ).

usage: python scripts/fit_engine_nvfp4_linear.py PARQUET MEM_S_PER_BYTE [TRT_LATENCY_S TRT_S_PER_FLOP]
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

MEM_LATENCY_S = 2.5e-6  # the profiles' regressions.memory latency


def load(path: str) -> pd.DataFrame:
    d = pd.read_parquet(path)
    d = d[(d.gemm_dtype == "nvfp4") & d.m.between(16, 16384) & d.n.between(4096, 65536) & d.k.between(4096, 65536)]
    return d.assign(t=d.latency * 1e-3, flops=2.0 * d.m * d.n * d.k,
                    bytes=2.0 * d.m * (d.n + d.k) + 0.5625 * d.n * d.k)


def predict(d: pd.DataFrame, lat: float, spf: float, spb: float) -> np.ndarray:
    return np.maximum(lat + d.flops * spf, MEM_LATENCY_S + d.bytes * spb)


def fit_rms(d: pd.DataFrame, spb: float) -> tuple[float, float]:
    """(latency_s, seconds_per_flop) of least squared relative error: a grid refined about its best."""
    lat_us, tflops = 15.0, 4000.0
    for span in (0.9, 0.3, 0.1, 0.03, 0.01):
        grid = [(lat_us * (1 + a), tflops * (1 + b)) for a in np.linspace(-span, span, 21)
                for b in np.linspace(-span, span, 21)]
        errs = [float(((predict(d, la * 1e-6, 1e-12 / tf, spb) / d.t - 1.0) ** 2).mean()) for la, tf in grid]
        lat_us, tflops = grid[int(np.argmin(errs))]
    return lat_us * 1e-6, 1e-12 / tflops


def main() -> None:
    d, spb = load(sys.argv[1]), float(sys.argv[2])
    lat, spf = fit_rms(d, spb)
    rel = predict(d, lat, spf, spb) / d.t - 1.0
    print(f"rows {len(d)} kernel {sorted(d.kernel_source.unique())}")
    print(f"latency_s {lat:.3e} seconds_per_flop {spf:.3e} asymptote {1e-12 / spf:.0f} TFLOP/s "
          f"rms {np.sqrt((rel ** 2).mean()):.2f}")
    print("mean rel by M:", {m: round(float(r), 2) for m, r in rel.groupby(d.m).mean().items()
                             if m in (16, 128, 512, 2048, 8192, 16384)})
    if len(sys.argv) > 4:
        trt = predict(d, float(sys.argv[3]), float(sys.argv[4]), spb) / d.t - 1.0
        print(f"TensorRT-LLM fit on these rows: mean {trt.mean():+.2f} rms {np.sqrt((trt ** 2).mean()):.2f}",
              {m: round(float(r), 2) for m, r in trt.groupby(d.m).mean().items() if m in (16, 128, 1024, 16384)})


if __name__ == "__main__":
    main()
