"""A vLLM serving row's decode step as the model prices it, operator by operator, beside the kernels vLLM runs for
it as NVIDIA's aiconfigurator measured them on the same GPU (DeepSeek-V3/R1 shapes, TP without DP attention).
The vLLM twin of scripts/sglang_decode_kernels.py (same model side, same shapes).

usage: python scripts/vllm_decode_kernels.py DATA_DIR CSV ROW_ID[:BATCH|:pTOKENS] [...]
(:pTOKENS: one prompt chunk of TOKENS instead, as scripts/sglang_prefill_kernels.py; context_mla_perf of 0.14.0)
DATA_DIR holds gemm_perf, moe_perf and custom_allreduce_perf of one vLLM release on one GPU, plus mla_bmm_perf
(only 0.24.0 has one) and generation_mla_perf (0.14.0), e.g. ai-dynamo/aiconfigurator @095f58a5
aic-core/src/aiconfigurator_core/systems/data/h200_sxm/{gemm,moe,comm,mla}/vllm/0.14.0/ and mla_bmm/vllm/0.24.0/.
Measured, per layer: the FP8 block-scaled linears (kernel_source vllm_default, fp8_block rows: vLLM's own
W8A8 block-FP8 linear with its per-token-group activation quantization), the absorbed MLA's BMMs (BF16),
FlashMLA decode attention (0.14.0's table: each row is one eager call timed by the host, so it carries a
~0.2 ms launch floor per layer; printed apart, not summed), the fused MoE at balanced routing, two custom
all-reduces (CUDA-graph sweep), the BF16 router and LM head. Not measured, so not in the sum: norms, rotary,
the KV-cache write, the sampler. (needs pandas + pyarrow)"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from sglang_decode_kernels import VOCAB, _mla_s, model_decode_s  # noqa: E402
from sglang_prefill_kernels import _layer_linears_s, model_prefill_s  # noqa: E402
from sglang_prefill_kernels import (DENSE_I, DENSE_LAYERS, HEADS, HIDDEN, KV_LORA, MOE_I, MOE_LAYERS, NOPE,  # noqa: E402
                                    Q_LORA, ROPE, V, _gemm_s, _loglog)


# 0.11.0 runs FlashMLA on Hopper at the KV cache's BF16 (platforms/cuda.py get_attn_backend_cls: FLASHMLA unless told
# otherwise); 0.14.0's table times FlashMLA only at FP8 KV (its BF16 rows are vllm_flash_attn_mla), so those rows
FLASHMLA_KV = "fp8"


def measured_decode_s(data: Path, batch: int, context: float, tp: int, ep: int) -> dict[str, float]:
    """Seconds of the measured kernels of one decode step of ``batch`` requests (one token each), FP8 block."""
    gemms = pd.read_parquet(data / "gemm_perf.parquet")
    g, bf = gemms[gemms.gemm_dtype == "fp8_block"], gemms[gemms.gemm_dtype == "bfloat16"]
    m = pd.read_parquet(data / "moe_perf.parquet")
    m = m[(m.hidden_size == HIDDEN) & (m.num_experts == 256) & (m.inter_size == MOE_I) & (m.topk == 8)
          & (m.moe_dtype == "fp8_block") & (m.moe_tp_size == tp // ep) & (m.moe_ep_size == ep)
          & (m.distribution == "balanced")]
    experts = m.groupby("num_tokens").latency.median()
    bmm = pd.read_parquet(data / "mla_bmm_perf.parquet")
    bmm = bmm[(bmm.num_heads == HEADS // tp) & (bmm.bmm_dtype == "bfloat16")]
    ar = pd.read_parquet(data / "custom_allreduce_perf.parquet")
    ar = ar[(ar.num_gpus == tp) & (ar.backend == "vllm_graph")].groupby("message_size").latency.median()
    layers = DENSE_LAYERS + MOE_LAYERS

    def bmm_s(op: str) -> float:
        s = bmm[bmm.op_name == op].groupby("num_tokens").latency.median()
        return _loglog(s.index.to_numpy(float), s.to_numpy(), batch) * 1e-3

    attn_lin = (_gemm_s(g, batch, Q_LORA + KV_LORA + ROPE, HIDDEN) + _gemm_s(g, batch, HEADS * (NOPE + ROPE) // tp, Q_LORA)
                + _gemm_s(g, batch, HIDDEN, HEADS * V // tp))
    mlp = lambda inter: _gemm_s(g, batch, 2 * inter // tp, HIDDEN) + _gemm_s(g, batch, HIDDEN, inter // tp)  # noqa: E731
    return {"attn_linears": layers * attn_lin,
            "mla_bmm": layers * (bmm_s("mla_gen_pre") + bmm_s("mla_gen_post")),
            "dense_mlp+shared": DENSE_LAYERS * mlp(DENSE_I) + MOE_LAYERS * mlp(MOE_I),
            "router": MOE_LAYERS * _gemm_s(bf, batch, 256, HIDDEN),
            "experts": MOE_LAYERS * _loglog(experts.index.to_numpy(float), experts.to_numpy(), batch) * 1e-3,
            # message_size counts BF16 elements (scripts/extract_engine_allreduce.py)
            "allreduce": 2 * layers * _loglog(ar.index.to_numpy(float), ar.to_numpy(), batch * HIDDEN) * 1e-3,
            "lm_head": _gemm_s(bf, batch, VOCAB // tp, HIDDEN)}


def measured_prefill_s(data: Path, tokens: float, tp: int, ep: int) -> dict[str, float]:
    """Seconds of the measured kernels of one prompt chunk of ``tokens`` (one request, no prior context)."""
    gemms = pd.read_parquet(data / "gemm_perf.parquet")
    g = gemms[gemms.gemm_dtype == "fp8_block"]
    m = pd.read_parquet(data / "moe_perf.parquet")
    m = m[(m.hidden_size == HIDDEN) & (m.num_experts == 256) & (m.inter_size == MOE_I) & (m.topk == 8)
          & (m.moe_dtype == "fp8_block") & (m.moe_tp_size == tp // ep) & (m.moe_ep_size == ep)
          & (m.distribution == "balanced")]
    experts = m.groupby("num_tokens").latency.median()
    a = pd.read_parquet(data / "context_mla_perf.parquet")
    a = a[(a.batch_size == 1) & (a.num_heads == HEADS // tp) & (a.kv_cache_dtype == "fp8")].groupby("isl").latency.median()
    return {"linears": DENSE_LAYERS * _layer_linears_s(g, g, tokens, tp, False) + MOE_LAYERS * _layer_linears_s(g, g, tokens, tp, True),
            "experts": MOE_LAYERS * _loglog(experts.index.to_numpy(float), experts.to_numpy(), tokens) * 1e-3,
            "attention": (DENSE_LAYERS + MOE_LAYERS) * _loglog(a.index.to_numpy(float), a.to_numpy(), tokens) * 1e-3}


def main() -> None:
    data, rows = Path(sys.argv[1]), {r["id"]: r for r in csv.DictReader(open(sys.argv[2], encoding="utf-8"))}
    for arg in sys.argv[3:]:
        row_id, _, b = arg.partition(":")
        if b.startswith("p"):  # ROW_ID:pTOKENS, a prompt chunk
            row, tokens = rows[row_id], int(b[1:])
            fmt = lambda d: ", ".join(f"{k} {v * 1e3:.1f}" for k, v in d.items())  # noqa: E731
            kernels = measured_prefill_s(data, tokens, int(row["tp"]), int(row["ep"] or 1))
            print(f"{row_id} prompt chunk {tokens} tokens\n  model (ms):    {fmt(model_prefill_s(row, tokens))}"
                  f"\n  kernels (ms):  {fmt(kernels)}, sum {sum(kernels.values()) * 1e3:.1f}")
            continue
        row = rows[row_id]
        tp, ep = int(row["tp"]), int(row["ep"] or 1)
        batch = int(b) if b else int(row["concurrency_or_batch"].split()[-1])
        context = 0.9 * int(row["isl"] or 215) + 0.45 * int(row["osl"] or 194)
        ours = model_decode_s(row, batch, context)
        kernels = measured_decode_s(data, batch, context, tp, ep)
        flashmla = (DENSE_LAYERS + MOE_LAYERS) * _mla_s(pd.read_parquet(data / "generation_mla_perf.parquet"), batch, context, tp,
                                                          FLASHMLA_KV)
        print(f"{row_id} {row['gpu']} TP{tp} EP{ep} batch {batch} context {context:.0f}, {row['metric']} {row['value']}")
        print("  model (ms):   " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in ours.items()))
        print("  kernels (ms): " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in kernels.items())
              + f", sum {sum(kernels.values()) * 1e3:.2f}; FlashMLA table (host-timed eager) {flashmla * 1e3:.2f}")


if __name__ == "__main__":
    main()
