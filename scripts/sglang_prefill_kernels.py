"""A serving row's prompt step as the model prices it, beside the sum of the kernels SGLang runs for it
as NVIDIA's aiconfigurator measured them (DeepSeek-V3/R1 shapes, one request's prompt, TP without DP
attention): the check of whether a short TTFT is the GPU's time or something around it.

usage: python scripts/sglang_prefill_kernels.py DATA_DIR CSV ROW_ID [ROW_ID ...]
DATA_DIR holds gemm_perf.parquet, moe_perf.parquet and context_mla_perf.parquet of one GPU and SGLang
release, e.g. from ai-dynamo/aiconfigurator @095f58a5 (fetch github:ai-dynamo/aiconfigurator), for B200:
  D=aic-core/src/aiconfigurator_core/systems/data/b200_sxm; V=0.5.14   # 0.5.12's reuse.yaml points here
  git --git-dir=MIRROR show HEAD:$D/gemm/sglang/$V/gemm_perf.parquet > DATA_DIR/gemm_perf.parquet
  (and moe/sglang/$V/moe_perf.parquet, mla/sglang/$V/context_mla_perf.parquet alike)
The kernels: fp8_block linears (DeepGEMM with its activation quantization, the collector's gemm_op),
nvfp4 linears (FlashInfer), the TRTLLM-Gen MoE layer at balanced routing (flashinfer_trtllm, what the
InferenceX recipes run; on Hopper tables the Triton fused MoE, moe_rows) and the context MLA attention (trtllm_mla
on B200; H200: h200_sxm/.../sglang/0.5.6.post2 or 0.5.14, FlashAttention-3 rows, KV format per kv_dtype), interpolated log-log in the token count
(nearest measured N and K, scaled by N K beyond the grid). Not in the sum: norms, rotary, the TP
all-reduces (the model's own are in its linear column), the LM head. (needs pandas + pyarrow)"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import eager_issue_s, replica_step_model

# DeepSeek-V3/R1 (config.json): hidden 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128,
# v 128, dense intermediate 18432 (3 layers), 58 MoE layers of 256 experts (intermediate 2048, top 8)
# and one shared expert
HIDDEN, HEADS, Q_LORA, KV_LORA, ROPE, NOPE, V, DENSE_I, MOE_I = 7168, 128, 1536, 512, 64, 128, 128, 18432, 2048
DENSE_LAYERS, MOE_LAYERS = 3, 58


def _loglog(x: np.ndarray, y: np.ndarray, at: float) -> float:
    return float(np.exp(np.interp(np.log(at), np.log(x), np.log(y))))


def _gemm_s(g: pd.DataFrame, tokens: float, n: int, k: int) -> float:
    ns, ks = g.n.unique(), g.k.unique()
    near_n, near_k = ns[np.argmin(abs(ns - n))], ks[np.argmin(abs(ks - k))]
    by_m = g[(g.n == near_n) & (g.k == near_k)].groupby("m").latency.median()
    return _loglog(by_m.index.to_numpy(float), by_m.to_numpy(), tokens) * 1e-3 * max(1.0, n * k / (near_n * near_k))


def _layer_linears_s(attn_g: pd.DataFrame, g: pd.DataFrame, tokens: float, tp: int, moe: bool) -> float:
    """Attention projections (fused q_a + kv_a, q_b, kv_b, o; at ``attn_g``'s format) and the dense MLP
    or the shared expert (at ``g``'s)."""
    attn = (_gemm_s(attn_g, tokens, Q_LORA + KV_LORA + ROPE, HIDDEN)
            + _gemm_s(attn_g, tokens, HEADS * (NOPE + ROPE) // tp, Q_LORA)
            + _gemm_s(attn_g, tokens, HEADS * (NOPE + V) // tp, KV_LORA) + _gemm_s(attn_g, tokens, HIDDEN, HEADS * V // tp))
    inter = (MOE_I if moe else DENSE_I) // tp
    return attn + _gemm_s(g, tokens, 2 * inter, HIDDEN) + _gemm_s(g, tokens, HIDDEN, inter)


def moe_rows(m: pd.DataFrame, tp: int, ep: int, dtype: str) -> pd.DataFrame:
    """The DeepSeek-V3/R1 MoE rows of the kernel SGLang runs on the table's GPU: the TRTLLM-Gen MoE
    (flashinfer_trtllm, the InferenceX Blackwell recipes' runner) where measured, else its Triton fused MoE
    (sglang_fused_moe_triton, the one fp8_block MoE kernel of aiconfigurator's H200 SGLang tables); balanced
    routing where measured, else the mildest power law (H200 SGLang 0.5.6.post2 has only power_law_1.01 / 1.2)."""
    m = m[(m.hidden_size == HIDDEN) & (m.num_experts == 256) & (m.inter_size == MOE_I) & (m.topk == 8)
          & (m.moe_dtype == ("fp8_block" if dtype == "fp8" else dtype)) & (m.moe_tp_size == tp // ep) & (m.moe_ep_size == ep)]
    source = next((k for k in ("sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton") if k in set(m.kernel_source)), None)
    if source is None:
        raise ValueError(f"no SGLang MoE rows for DeepSeek-V3/R1 experts at moe_tp {tp // ep}, moe_ep {ep}, {dtype}")
    m = m[m.kernel_source == source]
    return m[m.distribution == ("balanced" if "balanced" in set(m.distribution) else "power_law_1.01")]


def kv_dtype(row: dict) -> str:
    """The KV-cache format of a row's MLA tables: FP8 under ``--kv-cache-dtype fp8_e4m3``, else the model's BF16."""
    return "fp8" if "--kv-cache-dtype fp8" in row["notes"] else "bfloat16"


def measured_prefill_s(data: Path, tokens: float, tp: int, ep: int, dtype: str, kv: str = "fp8") -> dict[str, float]:
    """Seconds of the measured kernels of one prompt of ``tokens`` at TP ``tp`` (experts over ``ep``), KV in ``kv``."""
    gemms = pd.read_parquet(data / "gemm_perf.parquet")
    g = gemms[gemms.gemm_dtype == ("fp8_block" if dtype == "fp8" else dtype)]
    # the NVFP4 checkpoint keeps attention in BF16 (cost/checkpoint_layout.py)
    attn_g = gemms[gemms.gemm_dtype == "bfloat16"] if dtype == "nvfp4" else g
    experts = moe_rows(pd.read_parquet(data / "moe_perf.parquet"), tp, ep, dtype).groupby("num_tokens").latency.median()
    a = pd.read_parquet(data / "context_mla_perf.parquet")
    a = a[(a.batch_size == 1) & (a.num_heads == HEADS // tp) & (a.kv_cache_dtype == kv)].groupby("isl").latency.median()
    linears = (DENSE_LAYERS * _layer_linears_s(attn_g, g, tokens, tp, False)
               + MOE_LAYERS * _layer_linears_s(attn_g, g, tokens, tp, True))
    return {"linears": linears,
            "experts": MOE_LAYERS * _loglog(experts.index.to_numpy(float), experts.to_numpy(), tokens) * 1e-3,
            "attention": (DENSE_LAYERS + MOE_LAYERS) * _loglog(a.index.to_numpy(float), a.to_numpy(), tokens) * 1e-3}


def model_prefill_s(row: dict, tokens: int) -> dict[str, float]:
    """The step model's prompt step of one request of ``tokens``: its parts and the eager issue bound."""
    dep = case_from_row(row).deployment
    step = replica_step_model(dep, max_tokens=tokens, max_sampled=1)
    pairs = tokens * (tokens + 1) / 2
    attention = step.num_layers * (step.prefill_lat_s + pairs * step.prefill_s_per_pair)
    return {"linear+collectives": float(step.linear_s[tokens]), "attention": attention,
            "gpu": step.gpu_s(decodes=0, context=0, prefill_tokens=tokens, pairs=pairs, sampled=1),
            "eager_issue": eager_issue_s(dep)}


def main() -> None:
    data, rows = Path(sys.argv[1]), {r["id"]: r for r in csv.DictReader(open(sys.argv[2], encoding="utf-8"))}
    for row_id in sys.argv[3:]:
        row = rows[row_id]
        tp, ep, dtype = int(row["tp"]), int(row["ep"] or 1), row["precision"]
        tokens = int(0.9 * int(row["isl"]))  # the mean of InferenceX's uniform [0.8 L, L] draw
        ours = model_prefill_s(row, tokens)
        kernels = measured_prefill_s(data, tokens, tp, ep, dtype, kv_dtype(row))
        fmt = lambda d: ", ".join(f"{k} {v * 1e3:.1f}" for k, v in d.items())  # noqa: E731
        print(f"{row_id} {row['gpu']} TP{tp} EP{ep} {dtype} {tokens} tokens, {row['metric']} {row['value']}")
        print(f"  model (ms):    {fmt(ours)}")
        print(f"  kernels (ms):  {fmt(kernels)}, sum {sum(kernels.values()) * 1e3:.1f}")


if __name__ == "__main__":
    main()
