"""Fit TensorRT-LLM's own TP all-reduce (its Lamport MIN_LATENCY kernels) per GPU and group size from
NVIDIA's aiconfigurator measurements, as clusters.toml's intra_node.collectives.trtllm_all_reduce.<n>.

The collector (ai-dynamo/aiconfigurator @095f58a5 collector/network/collect_all_reduce.py) times
tensorrt_llm._torch.distributed.AllReduce with strategy AUTO (its autotuner off), BF16, inside a CUDA
graph, on inputs shaped [size // 4096, 4096] (or [1, size]); ``message_size`` counts elements. AUTO takes
the MIN_LATENCY kernels where the message fits the IPC workspace (16e6 bytes for 2 ranks, 8e6 above) and,
above 2 ranks, the input has at most 128 tokens; else NCCL (cpp/tensorrt_llm/thop/allreduceOp.cpp
selectImplementation @4bb1ef88800b, customAllReduceUtils.h getMaxRequiredWorkspaceSize). Only those rows
are fitted: time = latency + bytes x seconds_per_byte, least squares on relative error.

    python scripts/fit_trtllm_allreduce.py MIRROR_GIT_DIR
"""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np

TABLES = {  # GPU -> the data set's directory (1.2.0rc5 as the other TensorRT-LLM fits; GB200 has only 1.3.0rc10)
    "b200": "b200_sxm/comm/trtllm/1.2.0rc5",
    "h100": "h100_sxm/comm/trtllm/1.2.0rc5",
    "h200": "h200_sxm/comm/trtllm/1.2.0rc5",
    "gb200": "gb200/comm/trtllm/1.3.0rc10",
}
ROOT = "aic-core/src/aiconfigurator_core/systems/data"
TOKEN_WIDTH, MAX_TOKENS = 4096, 128  # the collector's row width; AUTO's MIN_LATENCY token limit above 2 ranks


def min_latency_rows(frame, n: int):
    """(bytes, seconds) of the rows AUTO ran on the MIN_LATENCY kernels for ``n`` ranks."""
    rows = frame[frame.num_gpus == n].sort_values("message_size")
    nbytes = rows.message_size.to_numpy(float) * 2
    tokens = np.maximum(1, rows.message_size.to_numpy() // TOKEN_WIDTH)
    workspace = 16e6 if n <= 2 else 8e6
    keep = (nbytes <= workspace) & ((n <= 2) | (tokens <= MAX_TOKENS))
    return nbytes[keep], rows.latency.to_numpy(float)[keep] * 1e-3


def fit(nbytes, seconds):
    """latency_s, seconds_per_byte minimising the relative error (weighted least squares)."""
    design = np.stack([np.ones_like(nbytes), nbytes], axis=1) / seconds[:, None]
    (latency, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    rel = (latency + per_byte * nbytes) / seconds - 1
    return latency, per_byte, float(np.sqrt(np.mean(rel ** 2))), rel


def main(git_dir: str) -> None:
    import pandas as pd

    for gpu, sub in TABLES.items():
        listing = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "--name-only", f"HEAD:{ROOT}/{sub}"],
                                 capture_output=True, text=True, check=True).stdout.split()
        name = next(f for f in listing if f.endswith(".parquet"))
        blob = subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{ROOT}/{sub}/{name}"],
                              capture_output=True, check=True).stdout
        frame = pd.read_parquet(io.BytesIO(blob))
        for n in sorted(frame.num_gpus.unique()):
            nbytes, seconds = min_latency_rows(frame, int(n))
            latency, per_byte, rms, rel = fit(nbytes, seconds)
            print(f"{gpu} n={n}: latency_s = {latency:.3e}, seconds_per_byte = {per_byte:.3e} "
                  f"({1 / per_byte / 1e9:.0f} GB/s), {len(nbytes)} rows {nbytes.min():.0f}..{nbytes.max():.0f} B, "
                  f"rms {rms:.1%}, worst {rel[np.argmax(abs(rel))]:+.0%}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/ai-dynamo+aiconfigurator/repo")
