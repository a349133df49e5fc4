"""Fit an engine's measured NVFP4 linear (aiconfigurator gemm_perf.parquet, nvfp4 rows; or with
--dtype=fp8_block its FP8 block-scaled linear, 128x128 weight blocks; --dtype=fp8 its per-tensor FP8 linear;
--dtype=bfloat16 its BF16 linear) to the roofline
cost/serving_step.py prices a GEMM with: max(latency + FLOPs * s/FLOP, memory latency + bytes * s/byte),
bytes = BF16 input and output + the format's weights (4.5 / 8 bits), least squares on relative error.
Prints the fit, the residual by M, and another fit's error on the same rows (how far the engines differ).

With --serial=S_PER_FLOP it fits the serial main-loop arm as well, holding seconds per FLOP at S_PER_FLOP:
max(latency + FLOPs * s/FLOP, serial latency + K * s/K + weight bytes * s/byte, memory arm) over M 1..16384
and N, K 512..65536 (with a few rows a GEMM's tiles fit in one wave and each loops over K in series:
at M = 1 SGLang 0.5.9's NVFP4 linear on B300 takes ~4 us + 0.9 ns per unit of K whatever N is, to N ~ 8k).

usage: python scripts/fit_engine_nvfp4_linear.py PARQUET MEM_S_PER_BYTE [TRT_LATENCY_S TRT_S_PER_FLOP] [--dtype=fp8_block]
           [--serial=S_PER_FLOP] [--less-scale-transform=] [--start-tflops=T] [--m-multiple=4]
           [--serial-start=LAT_US,SERIAL_US,NS_PER_K]
--less-scale-transform= (Blackwell fp8_block rows): fit each row less the collector's per-call weight-scale
transform that the engine does not run (scale_transform_s), the same for every row. --start-tflops: where the
grid search starts (it reaches at most 2.83x the start: an asymptote at that bound says start higher).
--serial-start: where the serial grids start (default 8,4,0.5; a result at 3.04x a start says start higher).
--m-multiple=4 (with --serial; vLLM 0.13+ fp8_block rows): only rows whose M is a multiple of 4, the CUTLASS blockwise
kernel without the input pad those releases add when M % 4 != 0 (0.10.2-0.11.0's pad is priced apart: cost/vllm_fp8_pad.py).
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

MEM_LATENCY_S = 2.5e-6  # the profiles' regressions.memory latency
# bytes a weight takes with its scales: NVFP4 4 bits + an FP8 scale per 16; FP8 block 8 bits + an FP32 per 128x128;
# per-tensor FP8 8 bits (one scale a tensor)
WEIGHT_BYTES = {"nvfp4": 0.5625, "fp8_block": 1.0 + 4.0 / (128 * 128), "fp8": 1.0, "bfloat16": 2.0}
# where the grid search starts (TFLOP/s): near the format's dense tensor-core rate
START_TFLOPS = {"nvfp4": 4000.0, "fp8_block": 800.0, "fp8": 1000.0, "bfloat16": 600.0}


def scale_transform_s(path: str) -> float:
    """Seconds a Blackwell fp8_block row carries beyond the GEMM an engine runs: aiconfigurator's collector hands
    DeepGEMM FP32 128x128 weight scales (collector/sglang/collect_gemm.py), which DeepGEMM's SM100 path re-lays
    as packed UE8M0 on every call (csrc/apis/layout.hpp transform_sf_into_required_layout: index_select, then
    get_mn_major_tma_aligned_packed_ue8m0_tensor), where SGLang does it once at load (fp8_utils.py
    requant_weight_ue8m0 -> transform_scale_ue8m0). Taken as the median of fp8_block - fp8 (the engine's per-tensor
    FP8 linear with its per-token quantization) over the shapes both measure at M <= 256, which on SM90 (no
    transform) is about zero (H200 SGLang 0.5.9: -0.4..-1.8 us)."""
    d = pd.read_parquet(path)
    d = d[d.gemm_dtype.isin(["fp8", "fp8_block"]) & (d.m <= 256)]
    p = d.pivot_table(index=["m", "n", "k"], columns="gemm_dtype", values="latency", aggfunc="median").dropna()
    return float((p.fp8_block - p.fp8).median()) * 1e-3


def load(path: str, dtype: str, offset_s: float = 0.0) -> pd.DataFrame:
    d = pd.read_parquet(path)
    d = d[(d.gemm_dtype == dtype) & d.m.between(16, 16384) & d.n.between(4096, 65536) & d.k.between(4096, 65536)]
    return d.assign(t=d.latency * 1e-3 - offset_s, flops=2.0 * d.m * d.n * d.k,
                    bytes=2.0 * d.m * (d.n + d.k) + WEIGHT_BYTES[dtype] * d.n * d.k)


def predict(d: pd.DataFrame, lat: float, spf: float, spb: float) -> np.ndarray:
    return np.maximum(lat + d.flops * spf, MEM_LATENCY_S + d.bytes * spb)


def fit_rms(d: pd.DataFrame, spb: float, tflops: float) -> tuple[float, float]:
    """(latency_s, seconds_per_flop) of least squared relative error: a grid refined about its best."""
    lat_us = 15.0
    for span in (0.9, 0.3, 0.1, 0.03, 0.01):
        grid = [(lat_us * (1 + a), tflops * (1 + b)) for a in np.linspace(-span, span, 21)
                for b in np.linspace(-span, span, 21)]
        errs = [float(((predict(d, la * 1e-6, 1e-12 / tf, spb) / d.t - 1.0) ** 2).mean()) for la, tf in grid]
        lat_us, tflops = grid[int(np.argmin(errs))]
    return lat_us * 1e-6, 1e-12 / tflops


def main() -> None:
    dtype = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--dtype=")), "nvfp4")
    args = [a for a in sys.argv if not a.startswith("--")]
    offset = scale_transform_s(args[1]) if any(a.startswith("--less-scale-transform") for a in sys.argv) else 0.0
    if offset:
        print(f"less the per-call scale transform: {offset * 1e6:.2f} us a row")
    d, spb = load(args[1], dtype, offset), float(args[2])
    start = next((float(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--start-tflops=")), START_TFLOPS[dtype])
    lat, spf = fit_rms(d, spb, start)
    rel = predict(d, lat, spf, spb) / d.t - 1.0
    print(f"rows {len(d)} kernel {sorted(d.kernel_source.unique())}")
    print(f"latency_s {lat:.3e} seconds_per_flop {spf:.3e} asymptote {1e-12 / spf:.0f} TFLOP/s "
          f"rms {np.sqrt((rel ** 2).mean()):.2f}")
    print("mean rel by M:", {m: round(float(r), 2) for m, r in rel.groupby(d.m).mean().items()
                             if m in (16, 128, 512, 2048, 8192, 16384)})
    if len(args) > 4:
        trt = predict(d, float(args[3]), float(args[4]), spb) / d.t - 1.0
        print(f"TensorRT-LLM fit on these rows: mean {trt.mean():+.2f} rms {np.sqrt((trt ** 2).mean()):.2f}",
              {m: round(float(r), 2) for m, r in trt.groupby(d.m).mean().items() if m in (16, 128, 1024, 16384)})


def serial_fit(path: str, dtype: str, spb: float, spf: float, offset_s: float = 0.0, m_multiple: int = 1,
               start: tuple[float, ...] = (8.0, 4.0, 0.5)) -> None:
    """(latency, serial latency, seconds per K) of least squared relative error at ``spf``, by refined grids;
    each row less ``offset_s`` (scale_transform_s); only rows whose M is a multiple of ``m_multiple``."""
    d = pd.read_parquet(path)
    d = d[(d.gemm_dtype == dtype) & d.m.between(1, 16384) & d.n.between(512, 65536) & d.k.between(512, 65536)
          & (d.m % m_multiple == 0)]
    t, flops, k = d.latency.to_numpy() * 1e-3 - offset_s, 2.0 * d.m * d.n * d.k, d.k.to_numpy(float)
    weights, act = WEIGHT_BYTES[dtype] * d.n * d.k, 2.0 * d.m * (d.n + d.k)

    def predict_serial(lat_us: float, serial_us: float, per_k_ns: float) -> np.ndarray:
        return np.maximum.reduce([lat_us * 1e-6 + flops * spf, serial_us * 1e-6 + k * per_k_ns * 1e-9 + weights * spb,
                                  MEM_LATENCY_S + (weights + act) * spb])

    p = start  # (latency us, serial us, ns per K): the grids reach at most 3.04x (and 0.03x) of it
    for span in (0.8, 0.4, 0.15, 0.05):
        grid = [(p[0] * (1 + a), p[1] * (1 + b), p[2] * (1 + c)) for a in np.linspace(-span, span, 9)
                for b in np.linspace(-span, span, 9) for c in np.linspace(-span, span, 9)]
        errs = [float(((predict_serial(*q) / t - 1.0) ** 2).mean()) for q in grid]
        p = grid[int(np.argmin(errs))]
    rel = pd.Series(predict_serial(*p) / t - 1.0, index=d.index)
    big = (d.n >= 4096) & (d.k >= 4096)
    print(f"rows {len(d)}: latency_s {p[0] * 1e-6:.3e} serial_latency_s {p[1] * 1e-6:.3e} seconds_per_reduction "
          f"{p[2] * 1e-9:.3e} (seconds_per_flop {spf:.3e}) rms {np.sqrt((rel ** 2).mean()):.3f}")
    for name, rows in (("N, K >= 4096", big), ("N or K < 4096", ~big)):
        print(f"  mean rel by M, {name}:", {m: round(float(r), 3) for m, r in rel[rows].groupby(d.m[rows]).mean().items()
                                              if m in (1, 16, 128, 512, 2048, 8192, 16384)})


if __name__ == "__main__":
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    if "serial" in flags:
        plain = [a for a in sys.argv[1:] if not a.startswith("--")]
        offset = scale_transform_s(plain[0]) if "less-scale-transform" in flags else 0.0
        serial_fit(plain[0], flags.get("dtype", "nvfp4"), float(plain[1]), float(flags["serial"]), offset,
                   int(flags.get("m-multiple", "1")),
                   tuple(float(v) for v in flags.get("serial-start", "8,4,0.5").split(",")))
        sys.exit(0)
    main()
