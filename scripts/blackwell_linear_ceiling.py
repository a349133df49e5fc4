"""The highest NVFP4 and FP8 linear rates NVIDIA's aiconfigurator measured on a Blackwell GPU (randn data at the
GPU's power limit), beside the device profile's square-GEMM sweep (regressions.gemm: cuBLASLt on Azure ND GB200 v6,
FP4 inputs uniform on [-1, 1] cast to E2M1, five values) and its engine fits (regressions.serving_gemm*): why the
mlperf-nvidia presets price a TensorRT engine built without gemm_plugin at the fastest measured linear, not the
sweep (docs/serving.md, "MLPerf's TensorRT NVFP4 GEMMs"). A diagnosis: nothing here feeds a prediction.

For each table: the largest rate of any row, and the 90th percentile and median over the compute-bound shapes
(M, N, K >= 4096), in TFLOP/s (2 M N K / latency).

usage: python scripts/blackwell_linear_ceiling.py [AIC_GIT_DIR] [--gpu=b200_sxm]
AIC_GIT_DIR: a bare clone of ai-dynamo/aiconfigurator (default /work/.mirror/ai-dynamo+aiconfigurator/repo).
(needs pandas + pyarrow)"""

from __future__ import annotations

import io
import subprocess
import sys

import pandas as pd

from autotune.spec.hardware_data import load_cluster

COMMIT = "095f58a5"
DATA = "aic-core/src/aiconfigurator_core/systems/data"
RELEASES = [("trtllm", "1.3.0rc20"), ("trtllm", "1.3.0rc10"), ("vllm", "0.19.0"), ("vllm", "0.22.0"),
            ("sglang", "0.5.9"), ("sglang", "0.5.14")]
CLUSTERS = {"b200_sxm": "dgx-b200", "gb200": "gb200-nvl72"}


def table(git_dir: str, gpu: str, engine: str, version: str) -> pd.DataFrame | None:
    """One gemm_perf.parquet at COMMIT, or None where the mirror lacks it."""
    path = f"{COMMIT}:{DATA}/{gpu}/gemm/{engine}/{version}/gemm_perf.parquet"
    done = subprocess.run(["git", "--git-dir", git_dir, "show", path], capture_output=True, check=False)
    return pd.read_parquet(io.BytesIO(done.stdout)) if done.returncode == 0 else None


def rates(frame: pd.DataFrame, dtype: str) -> tuple[float, float, float] | None:
    """(max, p90 compute-bound, median compute-bound) TFLOP/s of the rows of ``dtype``."""
    rows = frame[frame.gemm_dtype == dtype]
    if rows.empty:
        return None
    tflops = 2.0 * rows.m * rows.n * rows.k / rows.latency / 1e9  # latency in ms
    big = tflops[(rows.m >= 4096) & (rows.n >= 4096) & (rows.k >= 4096)]
    return float(tflops.max()), float(big.quantile(0.9)), float(big.median())


def profile_lines(gpu: str) -> list[str]:
    """The device profile's sweep and engine-fit asymptotes, TFLOP/s."""
    device = load_cluster(CLUSTERS[gpu]).device
    out = []
    for (op_class, dtype), fit in sorted(device.compute.items()):
        if dtype in ("nvfp4", "fp8") and (op_class == "gemm" or op_class.startswith("serving_gemm")):
            out.append(f"  profile {op_class}.{dtype}: asymptote {1e-12 / fit.seconds_per_unit:.0f} TFLOP/s")
    return out


def main(argv: list[str]) -> None:
    args = [a for a in argv if not a.startswith("--")]
    git_dir = args[0] if args else "/work/.mirror/ai-dynamo+aiconfigurator/repo"
    gpu = next((a.split("=", 1)[1] for a in argv if a.startswith("--gpu=")), "b200_sxm")
    print(f"{gpu}: aiconfigurator @{COMMIT} linear rates, TFLOP/s (max / p90 / median over M, N, K >= 4096)")
    for engine, version in RELEASES:
        frame = table(git_dir, gpu, engine, version)
        for dtype in ("nvfp4", "fp8"):
            got = None if frame is None else rates(frame, dtype)
            if got:
                print(f"  {engine} {version} {dtype}: {got[0]:.0f} / {got[1]:.0f} / {got[2]:.0f}")
    print("\n".join(profile_lines(gpu)))


if __name__ == "__main__":
    main(sys.argv[1:])
