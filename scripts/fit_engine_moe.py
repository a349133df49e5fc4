"""Fit an engine's measured MoE layer (aiconfigurator moe_perf.parquet) to the grouped-GEMM fit that
cost/serving_step.py prices the routed experts with: the module's time as the step model prices it
(two grouped GEMMs on the experts' rows rounded up to the M tile, the weights of the experts the
tokens reach, the activation, permute and unpermute at the profile's memory fit) for one rank of
``moe_ep`` holding E / moe_ep experts, least squares on relative error over balanced-routing rows.

usage: python scripts/fit_engine_moe.py PARQUET CLUSTER MOE_DTYPE DTYPE [MOE_TP[,MOE_TP...]]
           [--kernel=KERNEL_SOURCE] [--tokens=LO..HI] [--moe-backend=trtllm] [--ep1=] [--start=US,TFLOPS]
           [--hold-latency=] [--masked-rows=] [--unpadded=]
e.g.   python scripts/fit_engine_moe.py .../h100_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet dgx-h100 fp8 fp8
--kernel keeps one kernel_source (TensorRT-LLM's rows hold moe_torch_flow_cutlass and, for NVFP4 on
Blackwell, moe_torch_flow_min_latency: TRTLLMGenFusedMoE, fitted with --moe-backend=trtllm, its token tile);
--tokens the token counts (default 16..16384); several MOE_TP pool their rows; --ep1= keeps moe_ep 1 only
(at a few tokens the collector's balanced logits send a token's k experts to one EP rank, the one timed);
--hold-latency= keeps --start's latency and fits the rate alone (a fit over large token counts only, whose
rows do not see the latency: the fitted rate then leaves the weight-bound small batches as the profile had them);
--masked-rows= prices moe_ep > 1 rows with vLLM's expert_map work on every routed row (cost/expert_map.py);
--unpadded= prices the GEMMs' FLOPs without the M tile's padding, as serving_experts.experts_s prices a
weight-only 4-bit kernel's fit (serving_moe_w4a16_<engine>).
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pandas as pd

from autotune.cost import serving_step as ss
from autotune.cost.expert_map import masked_rows_s
from autotune.cost.expert_tiles import expert_row_share
from autotune.cost.runtime_kernels import runtime_cluster
from autotune.cost.serving_experts import expert_device, full_hidden
from autotune.cost.serving_ops import ops_s, select_ops
from autotune.graph.table import model_tables
from autotune.spec.hardware import Regression
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

BASE_MODEL = "qwen3-235b-a22b"  # any MoE preset: only its expert shape is replaced


def groups(path: str, moe_dtype: str, moe_tps: tuple[int, ...], kernel: str = "",
           tokens: tuple[int, int] = (16, 16384), ep1: bool = False) -> list[tuple[tuple, np.ndarray, np.ndarray]]:
    d = pd.read_parquet(path)
    d = d[(d.moe_dtype == moe_dtype) & (d.distribution == "balanced") & d.moe_tp_size.isin(moe_tps)
          & d.num_tokens.between(*tokens)]
    if kernel:
        d = d[d.kernel_source == kernel]
    if ep1:  # one rank holding every expert: where the measured rank's routed experts are the model's
        d = d[d.moe_ep_size == 1]
    keys = ["hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size", "moe_tp_size"]
    d = d.groupby(keys + ["num_tokens"], as_index=False).latency.median()
    return [(key, g.num_tokens.to_numpy(float), g.latency.to_numpy() * 1e-3) for key, g in d.groupby(keys)]


def pricer(cluster_name: str, dtype: str, moe_backend: str = "", masked_rows: bool = False, unpadded: bool = False):
    """time(latency_s, seconds_per_flop, key, tokens) of the module as serving_step prices it (``masked_rows``:
    a moe_ep > 1 rank's elementwise work on every routed row, cost/expert_map.py; ``unpadded``: FLOPs without
    the M tile's padding, the weight-only 4-bit fit's form)."""
    rt = load_runtime("tensorrt-llm-1.0")
    base = resolve_model(BASE_MODEL)
    cluster = ss.serving_cluster(runtime_cluster(load_cluster(cluster_name).for_gpus(8), rt), rt.serving.nvfp4_gemm_fit)
    device = expert_device(cluster.device)
    rate = ss.gemm_rate_dtype(device, dtype, "bf16")
    cache = {}

    def parts(key):
        if key not in cache:
            h, inter, k, e, ep, moe_tp = (int(v) for v in key)
            m = base.with_changes(hidden_size=h, expert_ffn_hidden_size=inter, num_experts_per_token=k, num_experts=e)
            t = model_tables(m, 1, 2, "flash")
            keep = np.array([n in ("permute", "unpermute") for n in t.moe_layer.names])
            # as serving_experts.experts_s runs a TP-split expert: its input rows and output partial sums whole
            experts, moves = full_hidden(replace(t.experts, weight_bytes=t.experts.weight_bytes / ep),
                                             select_ops(t.moe_layer, keep))
            cache[key] = (m, experts, moves, ep, moe_tp, {})
        return cache[key]

    devices = {}

    def time_s(lat, spf, key, tokens):
        m, experts, moves, ep, moe_tp, shares = parts(key)
        if (lat, spf) not in devices:
            devices.clear()
            devices[lat, spf] = device.with_changes(
                compute={**device.compute, ("gemm", rate): Regression(latency_s=lat, seconds_per_unit=spf)})
        dev = devices[lat, spf]
        if "reached" not in shares:  # routing shares depend on the shape and token counts only
            shares["reached"] = 1.0 - (1.0 - m.num_experts_per_token / m.num_experts) ** tokens
            shares["padded"] = 1.0 if unpadded else expert_row_share(tokens, m.num_experts, m.num_experts_per_token,
                                                                      rate, moe_backend)
            shares["moves"] = ops_s(moves, dev, dtype, rate, tokens / ep, 1)
            if masked_rows and ep > 1:
                shares["moves"] = shares["moves"] + masked_rows_s(experts, moves, dev, device, dtype, rate, tokens,
                                                                  tokens / ep, moe_tp, m.hidden_size, m.num_experts_per_token)
        return (ops_s(experts, dev, dtype, rate, tokens / ep, moe_tp, shares["reached"], shares["padded"])
                + shares["moves"])

    return time_s


def fit(rows, time_s, start: tuple[float, float] = (30.0, 1000.0), hold_latency: bool = False) -> tuple[float, float, np.ndarray]:
    """Grid search about ``start`` (us, TFLOP/s); it reaches at most 2.65x either: a bound hit says move it."""
    lat_us, tflops = start
    best = None
    for span in (0.8, 0.3, 0.1, 0.03):
        lat_steps = [0.0] if hold_latency else np.linspace(-span, span, 11)
        grid = [(lat_us * (1 + a), tflops * (1 + b)) for a in lat_steps for b in np.linspace(-span, span, 11)]
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
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path, cluster, moe_dtype, dtype = args[:4]
    moe_tps = tuple(int(v) for v in args[4].split(",")) if len(args) > 4 else (1,)
    lo, hi = (int(v) for v in flags.get("tokens", "16..16384").split(".."))
    rows = groups(path, moe_dtype, moe_tps, flags.get("kernel", ""), (lo, hi), "ep1" in flags)
    time_s = pricer(cluster, dtype, flags.get("moe-backend", ""), "masked-rows" in flags, "unpadded" in flags)
    lat, spf, rel = fit(rows, time_s, tuple(float(v) for v in flags.get("start", "30,1000").split(",")), "hold-latency" in flags)
    tokens = np.concatenate([tok for _, tok, _ in rows])
    print(f"rows {len(rel)} shapes {len(rows)}: latency_s {lat:.3e} seconds_per_flop {spf:.3e} "
          f"asymptote {1e-12 / spf:.0f} TFLOP/s rms {np.sqrt((rel ** 2).mean()):.2f} range {rel.min():+.2f}..{rel.max():+.2f}")
    print("mean rel by tokens:", {int(n): round(float(rel[tokens == n].mean()), 2)
                                  for n in (1, 4, 16, 128, 512, 1024, 2048, 4096, 8192, 16384) if (tokens == n).any()})


if __name__ == "__main__":
    main()
