"""MLPerf v5.1 DeepSeek-R1 Server rows: the decode step where the run sits, term by term, beside the measured ops.

For each Server TPOT row named: the measured operating point (decodes an instance = the instance's completed
tokens/s x the mean TPOT, Little's law; a rank's share under attention DP; the rank batch the config's
cuda_graph_batch_sizes pad it to) and the token-weighted mean cached positions a decode reads (the row's own
length table, outputs cut at the harness's max_output_len: E[input] + E[o (o - 1) / 2] / E[o]). Then the step as
``mlperf-nvidia-5.1`` prices it there (serving_step.StepModel parts, ms: replica linear = experts + exchange,
a rank's own non-expert operators, MLA's BMMs, decode attention, head), unpadded and at the padded batch, and,
with ``--aic DIR`` (aiconfigurator @095f58a5 parquet tables of the GPU, see below), the measured ops at the same
batch: TensorRT-LLM 1.3.0rc20's MLA generation module (projections + FP8-KV attention + output, BF16 GEMMs: the
NVFP4 checkpoint keeps attention in BF16) and attention kernel alone, the CUTLASS NVFP4 MoE module at the
instance's tokens (moe_ep 8, balanced and power-law 1.01) and WideEP's CUTLASS compute (1.3.0rc10). A diagnosis:
nothing here feeds a prediction.

    PYTHONPATH=. python scripts/mlperf_ds_decode_step.py tests/data/mlperf_v5_1_nvidia.csv mlp51-025 mlp51-043 \
        --aic b200=/tmp/aic_b200 --aic gb200=/tmp/aic_gb200
    # each DIR holds mla_generation_module_perf.parquet, generation_mla_perf.parquet (mla/trtllm/1.3.0rc20),
    # moe_perf.parquet (moe/trtllm/1.3.0rc20) and wideep_moe_perf.parquet (moe/trtllm/1.3.0rc10) of
    # aic-core/src/aiconfigurator_core/systems/data/{b200_sxm,gb200}/
"""

from __future__ import annotations

import argparse
import bisect
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trtllm_maxload_step import step_parts  # noqa: E402

from autotune.calibrate.serving_rows import case_from_row  # noqa: E402
from autotune.cost.serving_eval import replica_step_model  # noqa: E402

# cuda_graph_batch_sizes of the Server configs (mlcommons/inference_results_v5.1 @965182b03376
# closed/NVIDIA/configs/<system>/Server/deepseek-r1.py; CoreWeave's GB300-NVL8 copy the same as B200's)
GRAPH_SIZES = {"B200-SXM-180GB": (128, 256, 384, 512), "GB200-186GB": (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512),
               "GB300-288GB": (128, 256, 384, 512)}


def _loglog(xs, ys, x: float) -> float:
    order = np.argsort(xs)
    xs, ys = np.log(np.asarray(xs, float)[order]), np.log(np.asarray(ys, float)[order])
    return float(np.exp(np.interp(np.log(max(x, 1.0)), xs, ys)))


def _grid(frame, batch: float, context: float, step_col: str = "step") -> float:
    """Latency (ms) at ``batch`` and ``context``: log-log in the cached positions per batch, then in the batch."""
    per = {int(b): _loglog(g[step_col], g["latency"], context) for b, g in frame.groupby("batch_size")}
    return _loglog(list(per), list(per.values()), batch)


def measured(aic: Path, rank_batch: float, context: float, tokens: float) -> dict[str, float]:
    """ms a layer of the measured ops at DeepSeek-V3's shape."""
    import pandas as pd

    module = pd.read_parquet(aic / "mla_generation_module_perf.parquet")
    module = module[(module.num_heads == 128) & (module.kv_cache_dtype == "fp8") & (module.gemm_type == "bfloat16")]
    kernel = pd.read_parquet(aic / "generation_mla_perf.parquet")
    kernel = kernel[(kernel.num_heads == 128) & (kernel.kv_cache_dtype == "fp8") & (kernel.tp_size == 1)]
    moe = pd.read_parquet(aic / "moe_perf.parquet")
    moe = moe[(moe.kernel_source == "moe_torch_flow_cutlass") & (moe.moe_dtype == "nvfp4") & (moe.hidden_size == 7168)
              & (moe.inter_size == 2048) & (moe.num_experts == 256) & (moe.topk == 8) & (moe.moe_tp_size == 1)
              & (moe.moe_ep_size == 8)]
    wide = pd.read_parquet(aic / "wideep_moe_perf.parquet")
    wide = wide[(wide.op_name == "wideep_moe") & (wide.hidden_size == 7168) & (wide.num_experts == 256)
                & (wide.moe_ep_size == 8) & (wide.distribution == "power_law_1.01")]
    out = {"mla_module": _grid(module, rank_batch, context), "mla_kernel": _grid(kernel, rank_batch, context)}
    for dist in ("balanced", "power_law_1.01"):
        sel = moe[moe.distribution == dist]
        out[f"moe_cutlass_{dist}"] = _loglog(sel.num_tokens, sel.latency, tokens)
    out["moe_wideep_power_law_1.01"] = _loglog(wide.num_tokens, wide.latency, tokens) if len(wide) else float("nan")
    return out


def mean_context(load) -> float:
    """Token-weighted mean cached positions a decode reads (inputs and outputs drawn apart, as the simulator does)."""
    i, o = load.lengths.draw(200_000, 7)
    o = o.astype(float)
    return float(i.mean() + (o * (o - 1) / 2).mean() / o.mean())


def report(row: dict, tput_row: dict, aic: dict[str, Path]) -> list[str]:
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    instances = int(row["gpus"]) // dep.tp  # attention-DP instances of tp GPUs
    tpot_s = float(row["value"]) * 1e-9
    rate = float(tput_row["value"]) / instances  # an instance's output tokens/s
    decodes = rate * tpot_s
    ranks = dep.tp if dep.attention_dp else 1
    share = decodes / ranks
    sizes = GRAPH_SIZES.get(row["gpu"], ())
    i = bisect.bisect_left(sizes, int(np.ceil(share)))
    padded = sizes[i] if i < len(sizes) else int(np.ceil(share))
    context = mean_context(load)
    n, n_pad = int(round(decodes)), padded * ranks
    step = replica_step_model(dep, max_tokens=n_pad + 1, max_sampled=n_pad + 1)
    lines = [f"{row['id']} {row['gpu']} x{row['gpus']} ({instances} instance(s) of tp {dep.tp} ep {dep.ep}, attention DP "
             f"{dep.attention_dp}): measured TPOT {tpot_s * 1e3:.1f} ms at {rate:.0f} tokens/s an instance -> {decodes:.0f} "
             f"decodes ({share:.0f} a rank, graph-padded to {padded}), {context:.0f} cached positions a decode"]
    for label, rows_ in (("unpadded", n), (f"padded to {padded} a rank", n_pad)):
        # dummy requests of a padded graph hold no cache: the real decodes' positions only
        parts = step_parts(step, rows_, n * context)
        lines.append(f"  model step, {label}: " + "  ".join(f"{k} {v:.2f}" for k, v in parts.items())
                     + f"   (measured TPOT / model {tpot_s * 1e3 / parts['total']:.2f})")
    key = next((k for k in aic if k == row["gpu"].split("-")[0].lower()), None)
    if key:
        layers, moe_layers = dep.model.num_layers, dep.model.num_moe_layers
        for label, b in (("unpadded", share), ("padded", padded)):
            m = measured(aic[key], b, context, b * ranks)
            lines.append(f"  measured ({key}, {label} rank batch {b:.0f}, {b * ranks:.0f} MoE tokens), ms all layers: "
                         f"MLA module {m['mla_module'] * layers:.2f} (of it the attention kernel {m['mla_kernel'] * layers:.2f})"
                         f" | CUTLASS MoE balanced {m['moe_cutlass_balanced'] * moe_layers:.2f}, power-law "
                         f"{m['moe_cutlass_power_law_1.01'] * moe_layers:.2f} | WideEP compute power-law "
                         f"{m['moe_wideep_power_law_1.01'] * moe_layers:.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("ids", nargs="+", help="Server tpot_mean row ids")
    parser.add_argument("--aic", action="append", default=[], help="GPU=DIR (b200=..., gb200=...)")
    args = parser.parse_args()
    aic = {k: Path(v) for k, v in (a.split("=", 1) for a in args.aic)}
    rows = list(csv.DictReader(open(args.csv, encoding="utf-8", newline="")))
    by_id = {r["id"]: r for r in rows}
    for row_id in args.ids:
        row = by_id[row_id]
        tput = next(r for r in rows if r["source"] == row["source"] and r["metric"] == "output_tokens_per_s")
        print("\n".join(report(row, tput, aic)))


if __name__ == "__main__":
    main()
