"""A vLLM serving row's step of a grouped-query MoE model (Qwen3-MoE geometry), operator by operator as the model prices
it, beside the kernels vLLM runs for it as NVIDIA's aiconfigurator measured them on the same GPU: the GQA twin of
scripts/vllm_decode_kernels.py (DeepSeek's MLA), for the 1,000-prompt bursts' big steps (docs/serving.md, "The big
steps of the vLLM 0.11 bursts").

usage: python scripts/vllm_moe_step_kernels.py DATA_DIR CSV ROW_ID:TOKENS [...]
TOKENS decoding requests (one token each) over CONTEXT positions each (default 320: a ShareGPT burst's ~219-token
prompt and half its ~200-token output). DATA_DIR holds gemm_perf, moe_perf, custom_allreduce_perf and
generation_attention_perf of one vLLM release on one GPU, e.g. ai-dynamo/aiconfigurator @095f58a5
aic-core/src/aiconfigurator_core/systems/data/h100_sxm/{gemm,moe,comm,attention}/vllm/0.14.0/.
Measured, per layer: the fused QKV and output projections (bfloat16 or fp8_block rows, TP-sharded shapes), the
Triton fused MoE at balanced and power-law-1.01 routing (CUDA graph), two all-reduces (vLLM's CUDA-graph sweep;
message_size in BF16 elements, scripts/extract_engine_allreduce.py), the BF16 router, the LM head once. Decode
attention (the 0.14.0 table: each row one eager call timed by the host, so a launch floor of ~0.1 ms a layer is
inside) is printed apart. Not measured, so not in the sum: norms, rotary, the KV-cache write, the sampler.
(needs pandas + pyarrow)"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.expert_map import triton_experts
from autotune.cost.mesh import group_spans
from autotune.cost.serving_collectives import layer_collectives_s
from autotune.cost.serving_eval import _tp_allreduce, replica_gemm_fits, replica_step_model
from autotune.cost.serving_experts import experts_s, routed_moves
from autotune.cost.serving_ops import ops_s, select_ops
from autotune.cost.serving_step import ReplicaShape
from autotune.graph.table import model_tables

sys.path.insert(0, str(Path(__file__).parent))
from sglang_prefill_kernels import _gemm_s, _loglog  # noqa: E402

TABLE_DTYPE = {"bf16": "bfloat16", "fp8": "fp8_block"}  # the checkpoints' formats as the tables name them
CONTEXT = 320.0


def model_step_s(row: dict, batch: int, context: float = CONTEXT) -> dict[str, float]:
    """The step model's decode step of ``batch`` requests: the layer's operators times the layers, the routed experts,
    the TP all-reduces, attention, the head, and the whole GPU step (seconds)."""
    dep = case_from_row(row).deployment
    step = replica_step_model(dep, max_tokens=batch, max_sampled=batch)
    engine = dep.runtime.serving
    cluster, rate, backend = replica_gemm_fits(dep)
    # EP inside the TP group runs the experts' elementwise work on every routed row (expert_map.py), as step_model
    masked = engine.moe_ep_masked_rows and triton_experts(cluster.device, dep.dtype)
    tables = model_tables(dep.model, 1, 2, "flash")
    dense, moe = tables.layer_counts()
    layer = tables.moe_layer
    tokens, one = np.array([float(batch)]), np.array([0.0, float(batch)])
    parts = {n: moe * float(ops_s(select_ops(layer, np.arange(len(layer.names)) == i), cluster.device, dep.dtype, rate,
                                  tokens, dep.tp)[0]) for i, n in enumerate(layer.names) if n != "attention"}
    shape = ReplicaShape(tp=dep.tp, ep=dep.ep)
    span = group_spans("tp-cp-dp", dep.tp, 1, 1, cluster.gpus_per_node)["tp"]
    parts["allreduces"] = float(layer_collectives_s(dep.model, cluster, shape, span, one, dense, moe,
                                                    _tp_allreduce(dep, shape))[1])
    moves = select_ops(layer, routed_moves(layer))
    parts["experts"] = moe * float(experts_s(tables.experts, moves, dep.model, cluster, shape, dep.dtype, rate, one, backend,
                                                  masked)[1])
    attention = step.num_layers * step.decode_attention_s(batch, batch * context)
    gpu = step.gpu_s(decodes=batch, context=batch * context, prefill_tokens=0, pairs=0.0, sampled=batch)
    return parts | {"attention": attention, "head": float(step.head_s[batch]), "gpu_step": gpu}


def measured_step_s(frames: dict[str, pd.DataFrame], model, batch: int, tp: int, ep: int, dtype: str,
                    context: float = CONTEXT) -> dict[str, float]:
    """Seconds of the measured kernels of one decode step of ``batch`` requests of ``model`` (a ModelSpec of GQA MoE
    layers) from aiconfigurator's tables in ``frames`` (gemm, moe, allreduce, attention); "attention (eager)" apart."""
    g, layers, hidden = frames["gemm"], model.num_layers, model.hidden_size
    lin, bf = g[g.gemm_dtype == TABLE_DTYPE[dtype]], g[g.gemm_dtype == "bfloat16"]
    q_heads, kv_heads = model.num_heads // tp, max(1, model.num_kv_heads // tp)  # KV heads replicated past TP = heads
    qkv = _gemm_s(lin, batch, (q_heads + 2 * kv_heads) * model.head_dim, hidden)
    out = {"attn_linears": layers * (qkv + _gemm_s(lin, batch, hidden, q_heads * model.head_dim)),
           "router": layers * _gemm_s(bf, batch, model.num_experts, hidden)}
    m = frames["moe"]
    m = m[(m.hidden_size == hidden) & (m.num_experts == model.num_experts) & (m.topk == model.num_experts_per_token)
          & (m.inter_size == int(model.expert_ffn_hidden_size)) & (m.moe_dtype == TABLE_DTYPE[dtype])
          & (m.moe_tp_size == tp // ep) & (m.moe_ep_size == ep)]
    for dist in ("balanced", "power_law_1.01"):
        s = m[m.distribution == dist].groupby("num_tokens").latency.median()
        out[f"experts {dist}"] = layers * _loglog(s.index.to_numpy(float), s.to_numpy(), batch) * 1e-3
    ar = frames["allreduce"]
    ar = ar[(ar.num_gpus == tp) & (ar.backend == "vllm_graph")].groupby("message_size").latency.median()
    out["allreduce"] = 2 * layers * _loglog(ar.index.to_numpy(float), ar.to_numpy(), batch * hidden) * 1e-3
    out["lm_head"] = _gemm_s(bf, batch, model.vocab_size // tp, hidden)
    a = frames["attention"]
    a = a[(a.num_heads == q_heads) & (a.num_key_value_heads == kv_heads) & (a.kv_cache_dtype == "bfloat16")]
    b = a.batch_size[a.batch_size >= batch].min() if (a.batch_size >= batch).any() else a.batch_size.max()
    s = a[a.batch_size == b].assign(ctx=lambda d: d.isl + d.step).groupby("ctx").latency.median()
    out["attention (eager)"] = layers * _loglog(s.index.to_numpy(float), s.to_numpy(), context) * 1e-3
    return out


def main() -> None:
    data, rows = Path(sys.argv[1]), {r["id"]: r for r in csv.DictReader(open(sys.argv[2], encoding="utf-8"))}
    frames = {"gemm": pd.read_parquet(data / "gemm_perf.parquet"), "moe": pd.read_parquet(data / "moe_perf.parquet"),
              "allreduce": pd.read_parquet(data / "custom_allreduce_perf.parquet"),
              "attention": pd.read_parquet(data / "generation_attention_perf.parquet")}
    for arg in sys.argv[3:]:
        row_id, _, b = arg.partition(":")
        row = rows[row_id]
        tp, ep, batch = int(row["tp"]), int(row["ep"] or 1), int(b)
        model = case_from_row(row).deployment.model
        kernels = measured_step_s(frames, model, batch, tp, ep, row["precision"])
        summed = sum(v for k, v in kernels.items() if k not in ("experts power_law_1.01", "attention (eager)"))
        print(f"{row_id} {row['gpu']} TP{tp} EP{ep} {row['precision']} batch {batch}, {row['metric']} {row['value']}")
        print("  model (ms):   " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in model_step_s(row, batch).items()))
        print("  kernels (ms): " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in kernels.items())
              + f"; sum (balanced experts, attention apart) {summed * 1e3:.2f}")


if __name__ == "__main__":
    main()
