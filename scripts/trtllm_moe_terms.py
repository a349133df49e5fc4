"""A max-load TensorRT-LLM MoE row's decode step with its routed-expert term swapped for each MoE module
aiconfigurator measured, across releases and backends (issue 31, trtmoe46). A diagnosis: nothing here feeds a
prediction.

For each row it prints the priced run against the time the measured rate implies, the priced decode step at the
run's mean batch part by part (scripts/trtllm_maxload_step.py step_parts), the routed-expert layer the step model
prices (the table key serving_moe_table.measured_moe_key picks, and its time), then, for every release table
given, backend (CUTLASS, TRTLLM-Gen "min latency", DeepGEMM) and split ((moe_tp, moe_ep) = (tp, 1), the engine's
default without --ep, and (1, tp)), under balanced routing and the power law the model routes with: the measured
layer at the step's tokens and the decode step with that layer in place of the priced one, and the decode phase
(output length x that step) beside the implied run. A reading whose decode phase alone passes the implied run
cannot be what the page ran, whatever its prompt steps cost.

    PYTHONPATH=. python scripts/trtllm_moe_terms.py tests/data/trtllm_1_0_perf_overview.csv trt10-049 trt10-074 \
        --aic /tmp/aic   # {gpu}_moe_{release}.parquet: ai-dynamo/aiconfigurator @095f58a5
                         # aic-core/src/aiconfigurator_core/systems/data/{b200_sxm,h200_sxm,h100_sxm}/moe/trtllm/
                         # {release}/moe_perf.parquet (git show), e.g. b200_sxm_moe_1.2.0rc5.parquet
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trtllm_maxload_step import _interp, step_parts  # noqa: E402

from autotune.calibrate.serving_rows import case_from_row  # noqa: E402
from autotune.cost.moe_skew import routing_alpha  # noqa: E402
from autotune.cost.serving_eval import engine_moe_backend, replica_step_model, run_serving  # noqa: E402
from autotune.cost.serving_moe_table import measured_moe_key, measured_moe_s  # noqa: E402

# collect_moe.py @095f58a5 kernel_source names: the CUTLASS fused MoE, TRTLLM-Gen's (min-latency mode), DeepGEMM
BACKENDS = {"moe_torch_flow_cutlass": "CUTLASS", "moe_torch_flow_min_latency": "TRTLLM-Gen", "deepgemm": "DeepGEMM"}
GPU_FILES = {"B200": "b200_sxm", "H200": "h200_sxm", "H100": "h100_sxm"}  # GB200 has no TensorRT-LLM MoE table here


def _gpu_file(device_name: str) -> str:
    for key, stem in GPU_FILES.items():
        if device_name.upper().startswith(key):
            return stem
    return ""


def _shape_rows(frame, model, dtype: str):
    moe_dtype = "fp8_block" if dtype == "fp8" and model.fp8_block_scaled else dtype
    return frame[(frame.moe_dtype == moe_dtype) & (frame.hidden_size == model.hidden_size)
                 & (frame.inter_size == int(model.expert_ffn_hidden_size)) & (frame.num_experts == model.num_experts)
                 & (frame.topk == model.num_experts_per_token)]


def measured_layers(aic: Path, dep, tokens: int) -> list[tuple[str, float, float]]:
    """(label, ms a layer at ``tokens``, least ms a token a layer over the measured points) for every release
    table, backend, split and routing aiconfigurator has for the row's GPU, expert shape and dtype."""
    import pandas as pd

    stem, out = _gpu_file(dep.cluster.device.name), []
    dists = ("balanced", f"power_law_{routing_alpha(dep.model):g}")
    for path in sorted(aic.glob(f"{stem}_moe_*.parquet")) if stem else []:
        if path.stat().st_size == 0:
            continue
        rows = _shape_rows(pd.read_parquet(path), dep.model, dep.dtype)
        release = path.stem.split("_moe_")[-1]
        for source, backend in BACKENDS.items():
            for moe_tp, moe_ep in ((dep.tp, 1), (1, dep.tp)):
                for dist in dists:
                    sel = rows[(rows.kernel_source == source) & (rows.moe_tp_size == moe_tp) & (rows.moe_ep_size == moe_ep)
                               & (rows.distribution == dist)]
                    # a file holding several draws of a power-law point: their median, as extract_trtllm_moe.py cuts it
                    sel = sel.groupby("num_tokens", as_index=False)["latency"].median()
                    if len(sel) > 1:
                        out.append((f"{release} {backend} moe_tp {moe_tp} moe_ep {moe_ep} {dist}",
                                    _interp(sel, "num_tokens", tokens), float((sel.latency / sel.num_tokens).min())))
    return out


def report(row: dict, aic: Path | None) -> list[str]:
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    run = run_serving(dep, load)
    t, isl, osl = run.trace, float(load.input_len), float(load.output_len)
    rate = float(row["value"]) * (dep.gpus if "GPU" in row["unit"] else 1)
    implied = float(t.output_len.sum()) / rate
    n = max(1, round(float(t.mean_running)))
    step = replica_step_model(dep, max_tokens=n + 1, max_sampled=n + 1)
    parts = step_parts(step, n, n * (isl + osl / 2.0))
    m = dep.model
    key = measured_moe_key(m, dep.cluster.device.name, dep.dtype, engine_moe_backend(dep), dep.tp, dep.ep, dep.eplb)
    priced_layer = 1e3 * float(measured_moe_s(key, [n])[0]) if key else float("nan")
    lines = [f"{row['id']} {m.name} {dep.cluster.device.name} tp {dep.tp} ep {dep.ep} attention_dp {dep.attention_dp} "
             f"{dep.dtype} {isl:.0f}/{osl:.0f}: priced run {t.duration_s:.1f} s, measured rate implies {implied:.1f} s "
             f"({row['value']} {row['unit']}), {n} decoding on average",
             "  priced decode step (ms): " + "  ".join(f"{k} {v:.2f}" for k, v in parts.items()),
             f"  priced routed experts: {key or 'the grouped-GEMM fit'} {priced_layer:.3f} ms a layer x{m.num_moe_layers}"
             f" = {priced_layer * m.num_moe_layers:.1f} ms; decode phase {osl:.0f} x {parts['total']:.1f} ms = "
             f"{osl * parts['total'] / 1e3:.1f} s"]
    if aic is None or not key:
        return lines
    rest = parts["total"] - priced_layer * m.num_moe_layers
    prompt_tokens = float(t.input_len.sum())
    lines.append(f"  per reading: the layer at {n} tokens, the decode step with it, the decode phase against the implied run, "
                 f"and the {prompt_tokens:.0f} prompt tokens' experts at the reading's least measured ms a token")
    for label, ms, per_token in measured_layers(aic, dep, n):
        swapped = rest + ms * m.num_moe_layers
        floor = prompt_tokens * per_token * m.num_moe_layers / 1e3
        lines.append(f"    {label:52s} {ms:6.3f} ms: step {swapped:6.1f} ms, decode {osl * swapped / 1e3:6.1f} s "
                     f"({100.0 * (osl * swapped / 1e3 / implied - 1.0):+4.0f}%), prompts' experts >= {floor:5.1f} s")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--aic", type=Path, default=None, help="folder with aiconfigurator's MoE tables by GPU and release")
    args = parser.parse_args()
    rows = {r["id"]: r for r in csv.DictReader(open(args.csv, encoding="utf-8", newline=""))}
    for row_id in args.ids:
        print("\n".join(report(rows[row_id], args.aic)))


if __name__ == "__main__":
    main()
