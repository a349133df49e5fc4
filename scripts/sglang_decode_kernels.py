"""A serving row's decode step as the model prices it, operator by operator, beside the kernels SGLang runs
for it as NVIDIA's aiconfigurator measured them (DeepSeek-V3/R1 shapes, TP without DP attention): which
operators the model prices cheap at one token and at many.

usage: python scripts/sglang_decode_kernels.py DATA_DIR CSV ROW_ID[:BATCH] [ROW_ID[:BATCH] ...]
DATA_DIR holds gemm_perf, moe_perf, generation_mla_perf, mla_bmm_perf and custom_allreduce_perf
(.parquet) of one GPU and SGLang release, e.g. ai-dynamo/aiconfigurator @095f58a5 b200_sxm/*/sglang/0.5.14
(0.5.12's reuse.yaml points there; see scripts/sglang_prefill_kernels.py for the git show lines; mla_bmm and
comm alike). BATCH: the decoding requests (default the row's concurrency); the context each request reads is
the row's mean prompt plus half its mean output (InferenceX's [0.8 L, L] draws: 0.9 L each).
Measured, per layer: the linears (fp8_block: DeepGEMM with its activation quantization, each row less the
collector's per-call weight-scale transform, fit_engine_nvfp4_linear.scale_transform_s; nvfp4: FlashInfer
CuTe DSL; the NVFP4 checkpoint's attention in BF16), the absorbed MLA's two BMMs (mla_gen_pre / post),
trtllm_mla decode attention, the TRTLLM-Gen MoE layer at balanced routing (routing inside), two custom
all-reduces (CUDA-graph sweep); the BF16 router and LM head. Not measured by aiconfigurator, so not in the
sum: the norms, rotary, the KV-cache write, the sampler. (needs pandas + pyarrow)"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.mesh import group_spans
from autotune.cost.serving_collectives import layer_collectives_s
from autotune.cost.serving_eval import _tp_allreduce, replica_gemm_fits, replica_step_model
from autotune.cost.serving_ops import ops_s, select_ops
from autotune.cost.serving_experts import experts_s, routed_moves
from autotune.cost.serving_step import ReplicaShape
from autotune.graph.table import model_tables

sys.path.insert(0, str(Path(__file__).parent))
from fit_engine_nvfp4_linear import scale_transform_s  # noqa: E402
from sglang_prefill_kernels import (DENSE_I, DENSE_LAYERS, HEADS, HIDDEN, KV_LORA, MOE_I, MOE_LAYERS, NOPE,  # noqa: E402
                                    Q_LORA, ROPE, V, _gemm_s, _loglog, kv_dtype, moe_rows)

VOCAB = 129280  # DeepSeek-V3/R1 config.json vocab_size


def _mla_s(a: pd.DataFrame, batch: int, context: float, tp: int, kv: str) -> float:
    a = a[(a.num_heads == HEADS // tp) & (a.kv_cache_dtype == kv)]
    by_b = a[a.batch_size == batch] if batch in set(a.batch_size) else a[a.batch_size == a.batch_size[a.batch_size >= batch].min()]
    s = by_b.groupby("step").latency.median()
    return _loglog(s.index.to_numpy(float), s.to_numpy(), context) * 1e-3


def measured_decode_s(data: Path, batch: int, context: float, tp: int, ep: int, dtype: str,
                      kv: str = "fp8") -> dict[str, float]:
    """Seconds of the measured kernels of one decode step of ``batch`` requests (one token each), KV in ``kv``."""
    gemms = pd.read_parquet(data / "gemm_perf.parquet")
    g = gemms[gemms.gemm_dtype == ("fp8_block" if dtype == "fp8" else dtype)]
    bf = gemms[gemms.gemm_dtype == "bfloat16"]
    attn_g = bf if dtype == "nvfp4" else g
    experts = moe_rows(pd.read_parquet(data / "moe_perf.parquet"), tp, ep, dtype).groupby("num_tokens").latency.median()
    bmm = pd.read_parquet(data / "mla_bmm_perf.parquet")
    # BF16 for every checkpoint: SGLang dequantizes a 128 x 128 block-FP8 kv_b_proj to BF16 w_kc / w_vc at load on CUDA
    # (python/sglang/srt/models/deepseek_v2.py post_load_weights, block_quant_dequant) and runs torch.bmm on them
    bmm = bmm[(bmm.num_heads == HEADS // tp) & (bmm.bmm_dtype == "bfloat16")]
    ar = pd.read_parquet(data / "custom_allreduce_perf.parquet")
    # message_size: BF16 elements (extract_engine_allreduce.py); SGLang's own CUDA-graph sweep, else the table's one kernel
    # (H200 SGLang 0.5.6.post2 holds only TensorRT-LLM's custom all-reduce)
    ar = ar[ar.num_gpus == tp]
    ar = ar[ar.backend == "sglang_graph"] if "backend" in ar and "sglang_graph" in set(ar.backend) else ar
    ar = ar.groupby("message_size").latency.median()
    layers = DENSE_LAYERS + MOE_LAYERS

    def bmm_s(op: str) -> float:
        s = bmm[bmm.op_name == op].groupby("num_tokens").latency.median()
        return _loglog(s.index.to_numpy(float), s.to_numpy(), batch) * 1e-3

    # fp8_block rows less the collector's per-call weight-scale transform SGLang does not run (scale_transform_s)
    off = scale_transform_s(str(data / "gemm_perf.parquet")) if dtype == "fp8" else 0.0
    attn_lin = (_gemm_s(attn_g, batch, Q_LORA + KV_LORA + ROPE, HIDDEN) + _gemm_s(attn_g, batch, HEADS * (NOPE + ROPE) // tp, Q_LORA)
                + _gemm_s(attn_g, batch, HIDDEN, HEADS * V // tp) - 3 * off)
    mlp = lambda inter: _gemm_s(g, batch, 2 * inter // tp, HIDDEN) + _gemm_s(g, batch, HIDDEN, inter // tp) - 2 * off  # noqa: E731
    return {"attn_linears": layers * attn_lin,
            "mla_bmm": layers * (bmm_s("mla_gen_pre") + bmm_s("mla_gen_post")),
            "attention": layers * _mla_s(pd.read_parquet(data / "generation_mla_perf.parquet"), batch, context, tp, kv),
            "dense_mlp+shared": DENSE_LAYERS * mlp(DENSE_I) + MOE_LAYERS * mlp(MOE_I),
            "router": MOE_LAYERS * _gemm_s(bf, batch, 256, HIDDEN),
            "experts": MOE_LAYERS * _loglog(experts.index.to_numpy(float), experts.to_numpy(), batch) * 1e-3,
            "allreduce": 2 * layers * _loglog(ar.index.to_numpy(float), ar.to_numpy(), batch * HIDDEN) * 1e-3,
            "lm_head": _gemm_s(bf, batch, VOCAB // tp, HIDDEN)}


def _per_op_s(table, device, dtype, rate, tokens, tp) -> dict[str, float]:
    return {n: float(ops_s(select_ops(table, np.arange(len(table.names)) == i), device, dtype, rate, tokens, tp)[0])
            for i, n in enumerate(table.names)}


def model_decode_s(row: dict, batch: int, context: float) -> dict[str, float]:
    """The step model's decode step of ``batch`` requests over ``context`` positions each: per-operator
    seconds of a MoE layer times the MoE layers (the dense layers' likewise), attention, the rest."""
    dep = case_from_row(row).deployment
    step = replica_step_model(dep, max_tokens=batch, max_sampled=batch)
    cluster, rate, backend = replica_gemm_fits(dep)
    tables = model_tables(dep.model, 1, 2, "flash")
    moe_ops = _per_op_s(tables.moe_layer, cluster.device, dep.dtype, rate, np.array([float(batch)]), dep.tp)
    attention = step.num_layers * step.decode_attention_s(batch, batch * context)
    gpu = step.gpu_s(decodes=batch, context=batch * context, prefill_tokens=0, pairs=0.0, sampled=batch)
    parts = {f"moe_layer.{k}": MOE_LAYERS * v for k, v in moe_ops.items() if k != "attention"}
    shape = ReplicaShape(tp=dep.tp, ep=dep.ep)
    span = group_spans("tp-cp-dp", dep.tp, 1, 1, cluster.gpus_per_node)["tp"]
    dense, moe = tables.layer_counts()
    one = np.array([0.0, float(batch)])
    parts["allreduces"] = float(layer_collectives_s(dep.model, cluster, shape, span, one, dense, moe, _tp_allreduce(dep, shape))[1])
    moves = select_ops(tables.moe_layer, routed_moves(tables.moe_layer))
    parts["experts"] = moe * float(experts_s(tables.experts, moves, dep.model, cluster, shape, dep.dtype, rate, one, backend)[1])
    parts["mla_bmm (absorbed, measured; kv_up above is not in linear_s then)"] = step.up_projection_s(batch, 0)
    return parts | {"attention": attention, "head": float(step.head_s[batch]),
                    "linear_s (all but attention, head)": float(step.linear_s[batch]), "gpu_step": gpu}


def main() -> None:
    data, rows = Path(sys.argv[1]), {r["id"]: r for r in csv.DictReader(open(sys.argv[2], encoding="utf-8"))}
    for arg in sys.argv[3:]:
        row_id, _, b = arg.partition(":")
        row = rows[row_id]
        tp, ep, dtype = int(row["tp"]), int(row["ep"] or 1), row["precision"]
        batch = int(b) if b else int(row["concurrency_or_batch"].split()[-1])
        context = 0.9 * int(row["isl"]) + 0.45 * int(row["osl"])
        ours = model_decode_s(row, batch, context)
        kernels = measured_decode_s(data, batch, context, tp, ep, dtype, kv_dtype(row))
        print(f"{row_id} {row['gpu']} TP{tp} EP{ep} {dtype} batch {batch} context {context:.0f}, {row['metric']} {row['value']}")
        print("  model (ms):   " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in ours.items()))
        print("  kernels (ms): " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in kernels.items())
              + f", sum {sum(kernels.values()) * 1e3:.2f}")


if __name__ == "__main__":
    main()
