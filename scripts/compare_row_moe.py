"""A measured MoE layer (aiconfigurator moe_perf.parquet) against the step model's routed experts a layer for a
check row's deployment, at moe_ep 1, balanced routing, moe_tp 1/2/4/8 and 128 / 32 experts of the row's expert
shape: measured us / the model's error by token count.

usage: python scripts/compare_row_moe.py CSV ROW_ID PARQUET KERNEL_SOURCE MOE_DTYPE
e.g.   python scripts/compare_row_moe.py tests/data/vllm_newer_check.csv vn-b2-01 .../b200_sxm/moe/vllm/0.24.0/moe_perf.parquet
           vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic w4a16_mxfp4
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import csv
import sys
from dataclasses import replace

import pandas as pd

import autotune.cost.serving_step as ss
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model

TOKENS = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def experts_per_layer(deployment, tp: int, experts: int):
    """The routed experts' seconds a layer for 0..8192 tokens: the step with them less the step without."""
    dep = replace(deployment, tp=tp, ep=1, model=deployment.model.with_changes(num_experts=experts))
    with_experts = replica_step_model(dep, max_tokens=8192, max_sampled=8).linear_s
    original = ss.experts_s
    try:
        ss.experts_s = lambda *a, **k: 0 * a[7]
        ss._step_model.cache_clear()
        without = replica_step_model(dep, max_tokens=8192, max_sampled=8).linear_s
    finally:
        ss.experts_s = original
        ss._step_model.cache_clear()
    return (with_experts - without) / dep.model.num_layers


def main() -> None:
    path_csv, row_id, parquet, kernel, moe_dtype = sys.argv[1:6]
    deployment = case_from_row({r["id"]: r for r in csv.DictReader(open(path_csv))}[row_id]).deployment
    d = pd.read_parquet(parquet)
    d = d[(d.kernel_source == kernel) & (d.moe_dtype == moe_dtype) & (d.hidden_size == deployment.model.hidden_size)
          & (d.moe_ep_size == 1) & (d.distribution == "balanced")]
    for experts in (128, 32):
        for tp in (1, 2, 4, 8):
            measured = d[(d.num_experts == experts) & (d.moe_tp_size == tp)].groupby("num_tokens").latency.median() * 1e-3
            if measured.empty:
                continue
            priced = experts_per_layer(deployment, tp, experts)
            print(f"E {experts} moe_tp {tp}:", " ".join(f"{n}:{measured[n] * 1e6:.0f}us/{100 * (priced[n] / measured[n] - 1):+.0f}%"
                                                      for n in TOKENS if n in measured.index))


if __name__ == "__main__":
    main()
