"""Fit a weight-only 4-bit MoE kernel's measured layer (aiconfigurator moe_perf.parquet) to the ceiling form
serving_experts.experts_s prices it with: the two grouped GEMMs' unpadded FLOPs at a fitted rate and latency
(regressions.serving_moe_w4a16_<engine>) and the weights of the experts the tokens reach streamed at a fitted
rate and latency of their own (regressions.serving_moe_w4a16_stream_<engine>: the kernel converts each weight to
the activation format on its way in, so it streams slower than the memory fit), the larger of the two, plus the
permutes at the memory fit; least squares on relative error over balanced-routing, one-EP-rank rows.

usage: python scripts/fit_w4a16_stream.py PARQUET CLUSTER MOE_DTYPE DTYPE MOE_TP[,MOE_TP...] --kernel=KERNEL_SOURCE
           [--tokens=LO..HI]
e.g.   python scripts/fit_w4a16_stream.py .../b200_sxm/moe/vllm/0.24.0/moe_perf.parquet dgx-b200 w4a16_mxfp4 mxfp4 1,2,4,8
           --kernel=vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from fit_engine_moe import BASE_MODEL, groups  # noqa: E402

from autotune.cost import serving_step as ss  # noqa: E402
from autotune.cost.runtime_kernels import runtime_cluster  # noqa: E402
from autotune.cost.serving_experts import expert_device, full_hidden  # noqa: E402
from autotune.cost.serving_ops import ops_s, select_ops  # noqa: E402
from autotune.graph.table import model_tables  # noqa: E402
from autotune.spec.hardware import Regression  # noqa: E402
from autotune.spec.hardware_data import load_cluster  # noqa: E402
from autotune.spec.presets import resolve_model  # noqa: E402
from autotune.spec.runtime import load_runtime  # noqa: E402


def pricer(cluster_name: str, dtype: str):
    """time(params, key, tokens): params = (GEMM latency s, s/FLOP, stream latency s, s/byte)."""
    rt = load_runtime("vllm")
    base = resolve_model(BASE_MODEL)
    cluster = ss.serving_cluster(runtime_cluster(load_cluster(cluster_name).for_gpus(8), rt), rt.serving.nvfp4_gemm_fit)
    device = expert_device(cluster.device)
    rate = ss.gemm_rate_dtype(device, dtype, "bf16")
    cache = {}

    def parts(key, tokens):
        if key not in cache:
            h, inter, k, e, ep, moe_tp = (int(v) for v in key)
            m = base.with_changes(hidden_size=h, expert_ffn_hidden_size=inter, num_experts_per_token=k, num_experts=e)
            t = model_tables(m, 1, 2, "flash")
            keep = np.array([n in ("permute", "unpermute") for n in t.moe_layer.names])
            experts, moves = full_hidden(replace(t.experts, weight_bytes=t.experts.weight_bytes / ep),
                                         select_ops(t.moe_layer, keep))
            reached = 1.0 - (1.0 - k / e) ** tokens
            cache[key] = (experts, ep, moe_tp, reached, ops_s(moves, device, dtype, rate, tokens / ep, 1))
        return cache[key]

    def time_s(params, key, tokens):
        lat, spf, lat_m, spb = params
        experts, ep, moe_tp, reached, moves = parts(key, tokens)
        dev = device.with_changes(compute={**device.compute, ("gemm", rate): Regression(latency_s=lat, seconds_per_unit=spf)},
                                  memory=Regression(latency_s=lat_m, seconds_per_unit=spb))
        return ops_s(experts, dev, dtype, rate, tokens / ep, moe_tp, reached) + moves

    return time_s


def fit(rows, time_s, start=(20e-6, 1e-15, 5e-6, 2e-13)):
    """Coordinate grid search about ``start`` in log space, shrinking."""
    best = np.array(start, dtype=float)

    def mse(p):
        rel = np.concatenate([time_s(p, key, tok) / t - 1.0 for key, tok, t in rows])
        return float((rel ** 2).mean())

    err = mse(best)
    for span in (1.0, 0.5, 0.25, 0.1, 0.04):
        for _ in range(3):
            for i in range(4):
                for f in np.exp(np.linspace(-span, span, 9)):
                    p = best.copy()
                    p[i] *= f
                    e = mse(p)
                    if e < err:
                        best, err = p, e
    rel = np.concatenate([time_s(best, key, tok) / t - 1.0 for key, tok, t in rows])
    return best, rel


def main() -> None:
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    path, cluster, moe_dtype, dtype, tps = [a for a in sys.argv[1:] if not a.startswith("--")][:5]
    lo, hi = (int(v) for v in flags.get("tokens", "1..16384").split(".."))
    rows = groups(path, moe_dtype, tuple(int(v) for v in tps.split(",")), flags["kernel"], (lo, hi), True)
    time_s = pricer(cluster, dtype)
    (lat, spf, lat_m, spb), rel = fit(rows, time_s)
    tokens = np.concatenate([tok for _, tok, _ in rows])
    print(f"rows {len(rel)} shapes {len(rows)}: gemm latency_s {lat:.3e} seconds_per_flop {spf:.3e} ({1e-12 / spf:.0f} TFLOP/s); "
          f"stream latency_s {lat_m:.3e} seconds_per_byte {spb:.3e} ({1e-12 / spb:.2f} TB/s); "
          f"rms {np.sqrt((rel ** 2).mean()):.2f} range {rel.min():+.2f}..{rel.max():+.2f}")
    print("mean rel by tokens:", {int(n): round(float(rel[tokens == n].mean()), 2)
                                  for n in (1, 4, 16, 64, 128, 512, 1024, 2048, 4096, 8192, 16384) if (tokens == n).any()})
    for key, tok, t in rows:
        r = time_s((lat, spf, lat_m, spb), key, tok) / t - 1.0
        print(f"  E {int(key[3])} moe_tp {int(key[5])}:", " ".join(f"{int(n)}:{100 * x:+.0f}" for n, x in zip(tok, r)
                                                              if n in (1, 4, 16, 64, 256, 512, 1024, 4096, 16384)))


if __name__ == "__main__":
    main()
