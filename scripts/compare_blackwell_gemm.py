"""B200 against GB200 GEMM speed, measured: NVIDIA's aiconfigurator GEMM tables of the same engine release on
both GPUs (ai-dynamo/aiconfigurator @095f58a5 aic-core/src/aiconfigurator_core/systems/data/{b200_sxm,gb200}/
gemm/<engine>/<version>/gemm_perf.parquet; the releases both measured: TensorRT-LLM 1.3.0rc10 and 1.3.0rc20,
vLLM 0.19.0 / 0.22.0 / 0.24.0, SGLang 0.5.9 / 0.5.10 / 0.5.14). For each (engine, release, format) it matches
the (M, N, K) both tables hold and prints the median of GB200 time / B200 time (B200's speed as a share of
GB200's) by M, over N, K >= 4096 (the projections of models of hidden size 4096 and up), and over the
compute-bound rows (M, N, K >= 4096) that a square-GEMM sweep's asymptote stands for.

usage: python scripts/compare_blackwell_gemm.py [AIC_GIT_DIR] [--formats=nvfp4,fp8,bfloat16]
AIC_GIT_DIR: a bare clone of ai-dynamo/aiconfigurator (default /work/.mirror/ai-dynamo+aiconfigurator/repo).
(needs pandas + pyarrow)"""

from __future__ import annotations

import io
import subprocess
import sys

import pandas as pd

COMMIT = "095f58a5"
DATA = "aic-core/src/aiconfigurator_core/systems/data"
# the engine releases aiconfigurator measured on both GPUs (the same folder under b200_sxm and gb200)
RELEASES = [("trtllm", "1.3.0rc10"), ("trtllm", "1.3.0rc20"), ("vllm", "0.19.0"), ("vllm", "0.22.0"),
            ("vllm", "0.24.0"), ("sglang", "0.5.9"), ("sglang", "0.5.10"), ("sglang", "0.5.14")]
M_BINS = [0, 16, 128, 512, 2048, 8192, 16384]
KEYS = ["kernel_source", "gemm_dtype", "m", "n", "k"]


def table(git_dir: str, system: str, engine: str, version: str) -> pd.DataFrame | None:
    path = f"{COMMIT}:{DATA}/{system}/gemm/{engine}/{version}/gemm_perf.parquet"
    out = subprocess.run(["git", f"--git-dir={git_dir}", "show", path], capture_output=True, check=False)
    if out.returncode:
        return None
    d = pd.read_parquet(io.BytesIO(out.stdout))
    return d.groupby(KEYS, as_index=False).latency.median()


def matched(git_dir: str, engine: str, version: str, formats: list[str]) -> pd.DataFrame | None:
    b200, gb200 = (table(git_dir, s, engine, version) for s in ("b200_sxm", "gb200"))
    if b200 is None or gb200 is None:
        return None
    j = b200.merge(gb200, on=KEYS, suffixes=("_b200", "_gb200"))
    j = j[j.gemm_dtype.isin(formats) & (j.n >= 4096) & (j.k >= 4096)]
    return j.assign(speed=j.latency_gb200 / j.latency_b200, engine=engine, version=version)


def report(j: pd.DataFrame) -> None:
    by_m = j.groupby(["engine", "version", "kernel_source", "gemm_dtype", pd.cut(j.m, M_BINS)], observed=True)
    print(by_m.speed.median().unstack().round(3).to_string())
    big = j[j.m >= 4096]
    print("\ncompute-bound rows (M, N, K >= 4096): B200 speed / GB200 speed, median [p25, p75] (rows)")
    for (eng, ver, src, fmt), g in big.groupby(["engine", "version", "kernel_source", "gemm_dtype"]):
        q = g.speed.quantile([0.25, 0.5, 0.75]).round(3).tolist()
        print(f"  {eng:7s} {ver:10s} {src[:40]:40s} {fmt:10s} {q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}] ({len(g)})")
    print("\npooled over every engine and release, by format (M, N, K >= 4096):")
    for fmt, g in big.groupby("gemm_dtype"):
        print(f"  {fmt:10s} {g.speed.median():.3f} ({len(g)} rows); M 4096-8192 {g[g.m <= 8192].speed.median():.3f},"
              f" M > 8192 {g[g.m > 8192].speed.median():.3f}")


def main(argv: list[str]) -> None:
    args = [a for a in argv if not a.startswith("--")]
    git_dir = args[0] if args else "/work/.mirror/ai-dynamo+aiconfigurator/repo"
    formats = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--formats=")),
                   ["nvfp4", "fp8", "bfloat16"])
    parts = [m for eng, ver in RELEASES if (m := matched(git_dir, eng, ver, formats)) is not None]
    pd.set_option("display.width", 250)
    report(pd.concat(parts, ignore_index=True))


if __name__ == "__main__":
    main(sys.argv[1:])
