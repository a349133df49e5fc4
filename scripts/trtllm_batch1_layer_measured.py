"""A DeepSeek-R1 batch-1 decode step on 8 B200 (TP8 attention) as the sum of TensorRT-LLM's measured ops, beside
the step the cost model prices for a check row and the step the row measured (1 / its tokens a second a user):
whether the row's shortfall is in an op the tables time. A diagnostic; it changes nothing.

The ops, from NVIDIA aiconfigurator's B200 TensorRT-LLM 1.3.0rc20 tables (ai-dynamo/aiconfigurator @095f58a5,
aic-core/src/aiconfigurator_core/systems/data/b200_sxm/): the MLA attention module whole (projections, norms,
BMMs, RoPE and attention: mla_generation_module_perf, 16 heads a GPU, batch 1, BF16 GEMMs), the routed MoE layer
(moe_perf, 256 experts top 8, NVFP4, power-law 1.01 routing), the shared expert's NVFP4 GEMMs and the BF16 router
GEMM (gemm_perf, m = 1) and the TP8 all-reduce of one token's hidden state (custom_allreduce_perf), two a layer.

usage: python scripts/trtllm_batch1_layer_measured.py AIC_GIT_DIR CSV ROW_ID [MOE_KERNEL]
  MOE_KERNEL: moe_torch_flow_cutlass (default) or moe_torch_flow_min_latency (the TRTLLM backend)
e.g.   python scripts/trtllm_batch1_layer_measured.py /work/.mirror/ai-dynamo+aiconfigurator/repo \\
           tests/data/trtllm_blogs_check.csv trtblog-007
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys

import pandas as pd

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model

DATA = "aic-core/src/aiconfigurator_core/systems/data/b200_sxm"
HIDDEN, SHARED_INTER, EXPERTS = 7168, 2048, 256


def table(git_dir: str, path: str) -> pd.DataFrame:
    blob = subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{DATA}/{path}"], capture_output=True, check=True)
    return pd.read_parquet(io.BytesIO(blob.stdout))


def measured_layer_us(git_dir: str, kv: str, moe_tp: int, moe_ep: int, kernel: str, context: int) -> dict:
    """One MoE layer's measured ops at one token (microseconds)."""
    mla = table(git_dir, "mla/trtllm/1.3.0rc20/mla_generation_module_perf.parquet")
    mla = mla[(mla.num_heads == 16) & (mla.batch_size == 1) & (mla.gemm_type == "bfloat16") & (mla.kv_cache_dtype == kv)]
    moe = table(git_dir, "moe/trtllm/1.3.0rc20/moe_perf.parquet")
    moe = moe[(moe.num_tokens == 1) & (moe.hidden_size == HIDDEN) & (moe.num_experts == EXPERTS) & (moe.moe_dtype == "nvfp4")
              & (moe.moe_tp_size == moe_tp) & (moe.moe_ep_size == moe_ep) & (moe.kernel_source == kernel)
              & (moe.distribution == "power_law_1.01")]
    gemm = table(git_dir, "gemm/trtllm/1.3.0rc20/gemm_perf.parquet")
    gemm = gemm[gemm.m == 1]

    def g(dtype: str, n: int, k: int) -> float:
        return float(gemm[(gemm.gemm_dtype == dtype) & (gemm.n == n) & (gemm.k == k)].latency.iloc[0]) * 1e3

    ar = table(git_dir, "comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet")
    ar = ar[ar.num_gpus == 8]
    nearest = ar.iloc[(ar.message_size - HIDDEN).abs().argsort().iloc[0]]
    return {"mla module": float(mla.iloc[(mla.step - context).abs().argsort().iloc[0]].latency) * 1e3,
            "routed MoE": float(moe.latency.iloc[0]) * 1e3,
            "shared expert GEMMs": g("nvfp4", 2 * SHARED_INTER // 8, HIDDEN) + g("nvfp4", HIDDEN, SHARED_INTER // 8),
            "router GEMM": g("bfloat16", EXPERTS, HIDDEN),
            "2 all-reduces": 2 * float(nearest.latency) * 1e3}


def main(argv: list[str]) -> None:
    git_dir, path, row_id = argv[0], argv[1], argv[2]
    kernel = argv[3] if len(argv) > 3 else "moe_torch_flow_cutlass"
    row = {r["id"]: r for r in csv.DictReader(open(path, encoding="utf-8"))}[row_id]
    dep = case_from_row(row).deployment
    context = int(row["isl"]) + int(row["osl"]) // 2
    step = replica_step_model(dep, max_tokens=1, max_sampled=1)
    priced = step.gpu_s(decodes=1, context=float(context), prefill_tokens=0, pairs=0.0, sampled=1)
    kv = "fp8" if dep.runtime.serving.kv_bytes_per_element(dep.dtype, 2) == 1.0 else "bfloat16"
    parts = measured_layer_us(git_dir, kv, dep.tp // dep.ep, dep.ep, kernel, context)
    print(f"{row_id}: TP{dep.tp} EP{dep.ep} {dep.dtype}, {kv} KV, batch 1 at {context} positions, MoE {kernel}")
    for name, us in parts.items():
        print(f"  {name:20s} {us:6.1f} us")
    layer = sum(parts.values())
    print(f"  measured ops a MoE layer {layer:.1f} us, x {step.num_layers} layers {layer * step.num_layers / 1e3:.2f} ms "
          f"(the 3 dense layers counted as MoE ones); priced {priced * 1e3:.2f} ms"
          + (" an emitted token (MTP: a step over its acceptance length)" if dep.speculation else " a step"))
    if "MTP" not in row["notes"] or "Without MTP" in row["source"]:
        print(f"  the row's step: {1e3 / float(row['value']):.2f} ms (1 / {row['value']} {row['unit']})")


if __name__ == "__main__":
    main(sys.argv[1:])
