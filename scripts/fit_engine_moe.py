"""Fit an engine's measured MoE layer (aiconfigurator moe_perf.parquet) to the grouped-GEMM fit that
cost/serving_step.py prices the routed experts with: the module's time as the step model prices it
(two grouped GEMMs on the experts' rows rounded up to the M tile, the weights of the experts the
tokens reach, the activation, permute and unpermute at the profile's memory fit) for one rank of
``moe_ep`` holding E / moe_ep experts, least squares on relative error over balanced-routing rows.

usage: python scripts/fit_engine_moe.py PARQUET CLUSTER MOE_DTYPE DTYPE [MOE_TP]
e.g.   python scripts/fit_engine_moe.py .../h100_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet dgx-h100 fp8 fp8
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pandas as pd

from autotune.cost import serving_step as ss
from autotune.cost.expert_tiles import expert_tile_rows, padded_row_share
from autotune.cost.runtime_kernels import runtime_cluster
from autotune.cost.serving_ops import ops_s, select_ops
from autotune.graph.table import model_tables
from autotune.spec.hardware import Regression
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

BASE_MODEL = "qwen3-235b-a22b"  # any MoE preset: only its expert shape is replaced


def groups(path: str, moe_dtype: str, moe_tp: int) -> list[tuple[tuple, np.ndarray, np.ndarray]]:
    d = pd.read_parquet(path)
    d = d[(d.moe_dtype == moe_dtype) & (d.distribution == "balanced") & (d.moe_tp_size == moe_tp)
          & d.num_tokens.between(16, 16384)]
    d = d.groupby(["hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size", "num_tokens"],
                  as_index=False).latency.median()
    return [(key, g.num_tokens.to_numpy(float), g.latency.to_numpy() * 1e-3)
            for key, g in d.groupby(["hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size"])]


def pricer(cluster_name: str, dtype: str, moe_tp: int):
    """time(latency_s, seconds_per_flop, key, tokens) of the module as serving_step prices it."""
    rt = load_runtime("tensorrt-llm-1.0")
    base = resolve_model(BASE_MODEL)
    cluster = ss.serving_cluster(runtime_cluster(load_cluster(cluster_name).for_gpus(8), rt), rt.serving.nvfp4_gemm_fit)
    device = ss._expert_device(cluster.device)
    rate = ss._gemm_rate_dtype(device, dtype, "bf16")
    cache = {}

    def parts(key):
        if key not in cache:
            h, inter, k, e, ep = (int(v) for v in key)
            m = base.with_changes(hidden_size=h, expert_ffn_hidden_size=inter, num_experts_per_token=k, num_experts=e)
            t = model_tables(m, 1, 2, "flash")
            keep = np.array([n in ("permute", "unpermute") for n in t.moe_layer.names])
            experts = replace(t.experts, weight_bytes=t.experts.weight_bytes / ep)
            cache[key] = (m, experts, select_ops(t.moe_layer, keep), ep, {})
        return cache[key]

    devices = {}

    def time_s(lat, spf, key, tokens):
        m, experts, moves, ep, shares = parts(key)
        if (lat, spf) not in devices:
            devices.clear()
            devices[lat, spf] = device.with_changes(
                compute={**device.compute, ("gemm", rate): Regression(latency_s=lat, seconds_per_unit=spf)})
        dev = devices[lat, spf]
        if "reached" not in shares:  # routing shares depend on the shape and token counts only
            shares["reached"] = 1.0 - (1.0 - m.num_experts_per_token / m.num_experts) ** tokens
            shares["padded"] = padded_row_share(tokens, m.num_experts, m.num_experts_per_token, expert_tile_rows(rate))
            shares["moves"] = ops_s(moves, dev, dtype, rate, tokens / ep, 1)
        return (ops_s(experts, dev, dtype, rate, tokens / ep, moe_tp, shares["reached"], shares["padded"])
                + shares["moves"])

    return time_s


def fit(rows, time_s) -> tuple[float, float, np.ndarray]:
    lat_us, tflops = 30.0, 1000.0
    best = None
    for span in (0.8, 0.3, 0.1, 0.03):
        grid = [(lat_us * (1 + a), tflops * (1 + b)) for a in np.linspace(-span, span, 11) for b in np.linspace(-span, span, 11)]
        errs = []
        for la, tf in grid:
            rel = np.concatenate([time_s(la * 1e-6, 1e-12 / tf, key, tok) / t - 1.0 for key, tok, t in rows])
            errs.append(float((rel ** 2).mean()))
        lat_us, tflops = grid[int(np.argmin(errs))]
        best = errs[int(np.argmin(errs))]
    rel = np.concatenate([time_s(lat_us * 1e-6, 1e-12 / tflops, key, tok) / t - 1.0 for key, tok, t in rows])
    print(f"best mse {best:.4f}")
    return lat_us * 1e-6, 1e-12 / tflops, rel


def main() -> None:
    path, cluster, moe_dtype, dtype = sys.argv[1:5]
    moe_tp = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    rows = groups(path, moe_dtype, moe_tp)
    time_s = pricer(cluster, dtype, moe_tp)
    lat, spf, rel = fit(rows, time_s)
    tokens = np.concatenate([tok for _, tok, _ in rows])
    print(f"rows {len(rel)} shapes {len(rows)}: latency_s {lat:.3e} seconds_per_flop {spf:.3e} "
          f"asymptote {1e-12 / spf:.0f} TFLOP/s rms {np.sqrt((rel ** 2).mean()):.2f} range {rel.min():+.2f}..{rel.max():+.2f}")
    print("mean rel by tokens:", {int(n): round(float(rel[tokens == n].mean()), 2) for n in (16, 128, 512, 1024, 2048, 4096, 16384)})


if __name__ == "__main__":
    main()
