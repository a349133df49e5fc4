"""A max-load TensorRT-LLM row's priced steps, part by part, beside the kernels aiconfigurator measured (issue 31).

For each row: the engine's limits (sequences and tokens a step, the KV cache priced against what the run's
requests hold at once), the simulated run against the time the measured rate implies, then two steps as the
step model prices them (serving_step.StepModel.gpu_s, its parts in ms): a decode-only step at the run's mean
decode batch and a mixed step of that batch plus the prompt tokens the per-rank token budget leaves. With
``--aic DIR`` (a folder holding aiconfigurator's B200 parquet tables, read with pandas) it also prints, for an
MLA model, the measured counterparts a layer: the whole MLA generation module (projections, attention, output;
collector/trtllm/collect_mla_module.py) at the rank's batch and context, and TensorRT-LLM's fused CUTLASS MoE
module (collect_moe.py) at the step's tokens, at the row's (moe_tp, moe_ep) and at moe_ep = tp, under balanced
and power-law (alpha 1.01) routing. A diagnosis: nothing here feeds a prediction.

    PYTHONPATH=. python scripts/trtllm_maxload_step.py tests/data/trtllm_1_0_perf_overview.csv trt10-074 \
        [--aic /tmp/aic]   # mla_generation_module_perf.parquet and moe_perf.parquet from
                           # ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data/b200_sxm/{mla,moe}/trtllm/1.3.0rc20
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_limits, replica_step_model, run_serving


def step_parts(step, decodes: int, context: float, prompt_tokens: int = 0, pairs: float = 0.0,
               sampled: int | None = None) -> dict[str, float]:
    """Milliseconds of a step's parts as StepModel.gpu_s adds them (prompts spread evenly over DP ranks; ``sampled``
    defaults to the decodes): replica-wide linear (the experts and collectives under DP attention, every operator but
    attention without), of it the MoE exchange, a rank's own non-expert operators, MLA's measured BMMs and kv_up,
    decode and prompt attention, head; ``total`` is their sum, gpu_s's value."""
    r, n = step.dp_ranks, decodes + prompt_tokens
    own_decodes, own_prompt = -(-decodes // r), -(-prompt_tokens // r)
    prompt_run = own_prompt * r if r > 1 else prompt_tokens  # gpu_s prices the busiest rank's share on every rank
    parts = {"replica_linear": float(step.linear_s[n]), "exchange": 0.0 if step.exchange_s is None else float(step.exchange_s[n]),
             "rank_own": float(step.rank_linear_s[own_decodes + own_prompt]) if r > 1 else 0.0,
             "up": step.up_projection_s(own_decodes, own_prompt) if r > 1 else step.up_projection_s(decodes, prompt_tokens),
             "decode_attn": step.num_layers * step.decode_attention_s(decodes, context) if decodes else 0.0,
             "prompt_attn": step.num_layers * step.prefill_attention_s(prompt_run, pairs) if prompt_tokens else 0.0,
             "head": float(step.head_s[min(decodes if sampled is None else sampled, len(step.head_s) - 1)])}
    parts["total"] = sum(v for k, v in parts.items() if k != "exchange")
    return {k: 1e3 * v for k, v in parts.items()}


def _fmt(parts: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.2f}" for k, v in parts.items())


def _interp(frame, column: str, x: float) -> float:
    """The latency (ms) at ``x`` of ``column``, log-log between the frame's two neighbouring rows."""
    frame = frame.sort_values(column)
    xs, ys = np.log(frame[column].to_numpy(float)), np.log(frame["latency"].to_numpy(float))
    return float(np.exp(np.interp(np.log(max(x, 1.0)), xs, ys)))


def measured_lines(aic: Path, dep, rank_batch: int, context: float, tokens: int) -> list[str]:
    """aiconfigurator's measured MLA generation module and CUTLASS NVFP4 MoE module for DeepSeek-V3's shape."""
    import pandas as pd

    m = dep.model
    heads = m.num_heads // (1 if dep.attention_dp else dep.tp)
    mla = pd.read_parquet(aic / "mla_generation_module_perf.parquet")
    mla = mla[(mla.num_heads == heads) & (mla.kv_cache_dtype == "fp8") & (mla.gemm_type == "bfloat16")]
    per_batch = {int(b): _interp(g, "step", context) for b, g in mla.groupby("batch_size")}
    module = float(np.exp(np.interp(np.log(rank_batch), np.log(list(per_batch)), np.log(list(per_batch.values())))))
    lines = [f"  measured MLA generation module ({heads} heads, FP8 KV, BF16 GEMMs, batch {rank_batch}, "
             f"{context:.0f} cached): {module:.3f} ms a layer, x{m.num_layers} = {module * m.num_layers:.1f} ms"]
    moe = pd.read_parquet(aic / "moe_perf.parquet")
    moe = moe[(moe.kernel_source == "moe_torch_flow_cutlass") & (moe.moe_dtype == "nvfp4") & (moe.hidden_size == m.hidden_size)
              & (moe.inter_size == m.expert_ffn_hidden_size) & (moe.num_experts == m.num_experts)
              & (moe.topk == m.num_experts_per_token)]
    for ep in sorted({dep.ep, dep.tp}):
        for dist in ("balanced", "power_law_1.01"):
            sel = moe[(moe.moe_tp_size == dep.tp // ep) & (moe.moe_ep_size == ep) & (moe.distribution == dist)]
            if len(sel):
                t = _interp(sel, "num_tokens", tokens)
                lines.append(f"  measured CUTLASS MoE moe_tp {dep.tp // ep} moe_ep {ep} {dist} at {tokens} tokens: "
                             f"{t:.3f} ms a layer, x{m.num_moe_layers} = {t * m.num_moe_layers:.1f} ms")
    return lines


def report(row: dict, aic: Path | None) -> list[str]:
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    limits, run = replica_limits(dep, load), run_serving(dep, load)
    t, isl, osl = run.trace, float(load.input_len), float(load.output_len)
    running = float(t.mean_running)
    need = min(len(t.input_len), limits.max_num_seqs) * (isl + osl)
    rate = float(row["value"]) * (dep.gpus if "GPU" in row["unit"] else 1)  # per-GPU units: the replica's rate
    implied = float(t.output_len.sum()) / rate if row["metric"] == "output_tokens_per_s" and load.kind == "max_throughput" \
        else None
    lines = [f"{row['id']} {dep.model.name} {dep.cluster.device.name} tp {dep.tp} ep {dep.ep} attention_dp {dep.attention_dp} "
             f"{dep.dtype}, {isl:.0f}/{osl:.0f}: limits {limits.max_num_seqs} seqs, {limits.max_num_batched_tokens} tokens a "
             f"step, KV {limits.kv_capacity_tokens} tokens (the requests running at once hold {need:.0f})",
             f"  priced run {t.duration_s:.1f} s, {t.steps} steps, {running:.0f} decoding on average"
             + (f"; the measured rate implies {implied:.1f} s" if implied else "")]
    n = max(1, round(running))
    ranks = dep.tp if dep.attention_dp else 1  # under DP attention each rank's scheduler has its own token budget
    per_rank = limits.max_num_batched_tokens // ranks - -(-n // ranks)
    prompts = max(0, per_rank // round(isl)) * ranks  # the whole prompts (no chunking) a mixed step takes
    step = replica_step_model(dep, max_tokens=n + prompts * round(isl) + 1, max_sampled=n + prompts + 1)
    context = n * (isl + osl / 2.0)
    lines.append(f"  decode {n}: " + _fmt(step_parts(step, n, context)))
    if prompts:
        pairs = prompts * isl * (isl + 1) / 2.0
        lines.append(f"  decode {n} + {prompts} prompts: " + _fmt(step_parts(step, n, context, prompts * round(isl), pairs,
                                                                                  n + prompts)))
    name = dep.cluster.device.name.lower()
    if aic is not None and dep.model.is_mla and "b200" in name and "gb200" not in name:  # the tables are B200's
        lines += measured_lines(aic, dep, -(-n // step.dp_ranks), isl + osl / 2.0, n)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--aic", type=Path, default=None, help="folder with aiconfigurator's B200 parquet tables")
    args = parser.parse_args()
    rows = {r["id"]: r for r in csv.DictReader(open(args.csv, encoding="utf-8", newline=""))}
    for row_id in args.ids:
        print("\n".join(report(rows[row_id], args.aic)))


if __name__ == "__main__":
    main()
