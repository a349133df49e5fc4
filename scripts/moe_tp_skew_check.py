"""Check the skewed tile padding of expert-TP MoE layers (cost/expert_loads.py) against aiconfigurator's
measured moe_perf.parquet rows: for moe_ep 1, the measured power-law / balanced latency ratio at each
token count beside the ratio the step model prices for the same two expert loads: the collector's
"balanced" logits (collector/helper.py balanced_logits @095f58a5: token t takes experts (t + j ceil(E/k))
mod E, so every expert gets n k / E rows and min(E, n k) experts are reached) and its power-law draw
(expert_loads.power_law_rows), each priced as serving_experts.experts_s prices a TP-split expert (rows
padded to the tile, weights of the experts reached) at RUNTIME's expert fit on CLUSTER. The model's
uniform-routing pricing (binomial rows) is printed beside them ("unif/bal").

usage: python scripts/moe_tp_skew_check.py PARQUET RUNTIME CLUSTER MOE_DTYPE DTYPE HIDDEN INTER EXPERTS TOPK
           [MOE_TP[,MOE_TP...]] [--kernel=KERNEL_SOURCE] [--alpha=1.01]
e.g.   python scripts/moe_tp_skew_check.py .../h200_sxm/moe/vllm/0.14.0/moe_perf.parquet vllm dgx-h200
           fp8_block fp8 7168 2048 256 8 8
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pandas as pd

from autotune.cost import serving_step as ss
from autotune.cost.expert_loads import power_law_rows
from autotune.cost.expert_tiles import expert_tile_rows, padded_row_share
from autotune.cost.runtime_kernels import runtime_cluster
from autotune.cost.serving_experts import expert_device, full_hidden
from autotune.cost.serving_ops import ops_s
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

TOKENS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384)


def measured(path: str, moe_dtype: str, shape: tuple, moe_tp: int, kernel: str, alpha: str) -> pd.Series:
    d = pd.read_parquet(path)
    h, inter, e, k = shape
    d = d[(d.moe_dtype == moe_dtype) & (d.hidden_size == h) & (d.inter_size == inter) & (d.num_experts == e)
          & (d.topk == k) & (d.moe_ep_size == 1) & (d.moe_tp_size == moe_tp) & d.num_tokens.isin(TOKENS)]
    if kernel:
        d = d[d.kernel_source == kernel]
    t = d.pivot_table(index="num_tokens", columns="distribution", values="latency", aggfunc="median")
    return t[f"power_law_{alpha}"] / t["balanced"]


def loads(n: int, e: int, k: int, tile: int, alpha: float) -> dict[str, tuple[float, float]]:
    """(experts reached over E, padded rows over n k) under each expert load."""
    rows = power_law_rows(n, e, k, alpha, np.random.default_rng(0).random((32, e)))
    per = n * k / e
    balanced = (min(1.0, n * k / e), float(np.ceil(per / tile) * tile / per) if per >= 1 else float(tile))
    skewed = (float((rows > 0).mean()), float((np.ceil(rows / tile) * tile).sum(axis=1).mean() / (n * k)))
    uniform = (1.0 - (1.0 - k / e) ** n, float(padded_row_share(np.array([n]), e, k, tile)[0]))
    return {"balanced": balanced, "power_law": skewed, "uniform": uniform}


def main() -> None:
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path, runtime, cluster_name, moe_dtype, dtype = args[:5]
    shape = tuple(int(v) for v in args[5:9])
    alpha = flags.get("alpha", "1.01")
    rt = load_runtime(runtime)
    cluster = ss.serving_cluster(runtime_cluster(load_cluster(cluster_name).for_gpus(8), rt), rt.serving.nvfp4_gemm_fit)
    device = expert_device(cluster.device)
    rate = ss.gemm_rate_dtype(device, dtype, "bf16")
    h, inter, e, k = shape
    model = resolve_model("qwen3-235b-a22b").with_changes(hidden_size=h, expert_ffn_hidden_size=inter,
                                                           num_experts_per_token=k, num_experts=e)
    experts, _ = full_hidden(model_tables(model, 1, 2, "flash").experts, model_tables(model, 1, 2, "flash").moe_layer)
    tile = expert_tile_rows(rate)
    for moe_tp in (int(v) for v in (args[9] if len(args) > 9 else "8").split(",")):
        ratio = measured(path, moe_dtype, shape, moe_tp, flags.get("kernel", ""), alpha)
        print(f"moe_tp {moe_tp} tile {tile} alpha {alpha}: tokens, measured pl/bal, model pl/bal, model unif/bal")
        for n in TOKENS:
            share = loads(n, e, k, tile, float(alpha))
            t = {name: float(ops_s(replace(experts), device, dtype, rate, np.array([float(n)]), moe_tp,
                                   np.array([r]), np.array([p]))[0]) for name, (r, p) in share.items()}
            print(f"  {n:6d} {ratio.get(n, float('nan')):6.2f} {t['power_law'] / t['balanced']:6.2f} "
                  f"{t['uniform'] / t['balanced']:6.2f}")


if __name__ == "__main__":
    main()
