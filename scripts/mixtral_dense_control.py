"""Mixtral 8x7B on TensorRT-LLM's TensorRT engines against a dense control (issue 31, mixtral47). A diagnosis:
nothing here feeds a prediction.

Mixtral 8x7B is Mistral 7B with every MLP replaced by 8 experts of that MLP's shape, top-2 routed: the same 32
layers, attention (32 query / 8 KV heads of 128) and hidden size 4096 (config.json of both; the registry's
Mistral 7B is v0.3's, its vocabulary 32,768 against 32,000, a head 2.4% wider). The TensorRT-LLM v0.17
performance overview measured both, and Llama 3.1 8B (the same attention shape), at TP 1 in FP8 on H200 and H100
over nine ISL / OSL pairs (trtllm-bench on TensorRT engines, the MoE plugin, max load). This types those 54 rows
(the check file's trt017 TP 1 Mixtral rows with the model, lengths, request count and value changed), prices
them with check-published and prints each row's error and Mixtral's priced / measured over Mistral 7B's at the
same GPU and lengths: what the routed-expert FFN adds to the error, the rest of the step being the same
operators. ``--mlperf`` does the same for NVIDIA's MLPerf Hopper Offline rows (Mixtral against
Llama 2 70B on the same harness and GPUs). ``--aic PARQUET ...`` sets the priced routed-expert layer (TP 1)
beside aiconfigurator's Mixtral-shape CUTLASS MoE module (per-tensor FP8, moe_tp 1, moe_ep 1, power law 1.2;
TensorRT-LLM 1.2.0rc5-1.3.0rc20, the releases the mirror holds; its 0.20.0 and 1.0.0rc3 tables are in its
history as Git LFS pointers only). ``--expert-scale S`` prices everything again with every routed-expert layer's
time times S (a sensitivity, not a fit).

    PYTHONPATH=. python scripts/mixtral_dense_control.py [--mlperf] [--expert-scale 1.2] \\
        [--aic /tmp/aic/h200_sxm_1.3.0rc20.parquet /tmp/aic/h100_sxm_1.3.0rc20.parquet]
    # the parquet: ai-dynamo/aiconfigurator @095f58a5 aic-core/src/aiconfigurator_core/systems/data/
    # {h200_sxm,h100_sxm}/moe/trtllm/{1.2.0rc5,1.3.0rc10,1.3.0rc20}/moe_perf.parquet (git show; needs pandas)
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = ("NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @258c7540c035 (v0.17) ['All data in the "
          "table below was generated using version 0.17'], table 'Throughput (tokens / sec)', Tensor Model Parallel "
          "Size 1, FP8")
LENGTHS = ((128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (2048, 128), (2048, 2048), (5000, 500),
           (20000, 2000))
REQUESTS = dict(zip(LENGTHS, (30000, 3000, 1500, 3000, 3000, 3000, 1500, 1500, 1000)))  # SOURCE's $num_requests
# output tokens/s at LENGTHS, (H200 141GB, H100 80GB), from SOURCE
TABLE = {
    "Mixtral-8x7B": ((17157.72, 15962.49), (15095.21, 8290.13), (9534.62, 4784.86), (12105.27, 6800.6),
                     (10371.36, 6868.52), (2009.67, 1892.81), (6940.32, 3983.1), (2309.1, 1764.7), (1151.78, 673.7)),
    "Mistral-7B": ((31938.12, 31674.49), (27409.3, 23496.42), (18505.03, 14350.99), (22354.67, 18026.27),
                   (18426.16, 16035.66), (3834.43, 3642.48), (12347.37, 9958.17), (4041.59, 3591.33),
                   (1822.69, 1373.24)),
    "Llama-3.1-8B": ((29526.04, 28836.77), (25398.86, 21109.38), (17370.8, 13593.65), (21020.81, 16500.69),
                     (17537.96, 15244.78), (3794.14, 3556.73), (11968.5, 9488.42), (3987.79, 3559.36),
                     (1804.1, 1401.31)),
}
MODELS = {"Mixtral-8x7B": ("mistralai/Mixtral-8x7B-Instruct-v0.1 (variant not stated)", "moe", "46.70"),
          "Mistral-7B": ("mistralai/Mistral-7B-v0.1 (variant not stated)", "dense", "7.24"),
          "Llama-3.1-8B": ("meta-llama/Llama-3.1-8B-Instruct (variant not stated)", "dense", "8.03")}
GPUS = (("H200-SXM-141GB", "trt017-017"), ("H100-SXM-80GB", "trt017-021"))  # the check file's TP 1 Mixtral rows
CHECK = Path(__file__).resolve().parent.parent / "tests" / "data"
# NVIDIA's MLPerf Offline rows: (label, file, Mixtral row, Llama 2 70B row on the same round and GPUs)
MLPERF = (("v4.1 H100 x8", "serving_runs.csv", "mlp41-009", "mlp41-001"),
          ("v4.1 H200 x8", "serving_runs.csv", "mlp41-010", "mlp41-005"),
          ("v5.0 H200 x8", "mlperf_v5_0_nvidia.csv", "mlp50-027", "mlp50-016"),
          ("v5.0 B200 x8", "mlperf_v5_0_nvidia.csv", "mlp50-012", "mlp50-001"))
# and the Mixtral Server runs' rows (throughput, TTFT, TPOT)
SERVER = (("serving_runs.csv", ("mlp41-011", "mlp41-012", "mlp41-013")),
          ("mlperf_v5_0_nvidia.csv", ("mlp50-028", "mlp50-029", "mlp50-030", "mlp50-013", "mlp50-014", "mlp50-015")))


def _read(path: Path) -> tuple[list[str], dict[str, dict]]:
    with path.open(encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), {r["id"]: r for r in reader}


def overview_rows() -> tuple[list[str], list[dict]]:
    """The v0.17 overview's TP 1 rows of the three models, typed on the check file's trt017 Mixtral rows."""
    header, rows = _read(CHECK / "serving_runs.csv")
    out = []
    for model, values in TABLE.items():
        hf, arch, params = MODELS[model]
        for (isl, osl), pair in zip(LENGTHS, values):
            for (gpu, base), value in zip(GPUS, pair):
                row = dict(rows[base], id=f"{model}|{gpu[:4]}|{isl}/{osl}", model=model, hf_model_id=hf, arch=arch,
                           params_b=params, isl=str(isl), osl=str(osl), value=str(value), source=SOURCE,
                           concurrency_or_batch=f"max load (infinite request rate); num_requests={REQUESTS[(isl, osl)]}")
                out.append(row)
    return header, out


def mlperf_rows() -> tuple[list[str], list[dict]]:
    header, out = [], []
    for name, ids in [(name, ids) for _, name, *ids in MLPERF] + list(SERVER):
        header, rows = _read(CHECK / name)
        out += [rows[i] for i in ids if rows[i] not in out]
    return header, out


def price(header: list[str], rows: list[dict], scale: float) -> dict[str, dict]:
    """Each row's check-published JSON row (error_pct, priced_load), routed experts times ``scale``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
        done = subprocess.run([sys.executable, __file__, "--price", str(path), "--expert-scale", str(scale)],
                              capture_output=True, text=True, check=True)
    return {r["id"]: r for r in json.loads(done.stdout)["rows"]}


def _price_here(path: str, scale: float) -> int:
    """check-published --json on ``path`` in this process, every routed-expert layer's time times ``scale``."""
    import autotune.cost.serving_step as ss
    from autotune.cli.main import main

    fitted, table = ss.experts_s, ss.measured_moe_s
    ss.experts_s = lambda *a, **k: scale * fitted(*a, **k)
    ss.measured_moe_s = lambda *a, **k: scale * table(*a, **k)
    return main(["check-published", path, "--json"])


def _ratio(mixtral: float, control: float) -> float:
    """Mixtral's priced / measured over the control's, as a signed percentage."""
    return ((1 + mixtral / 100) / (1 + control / 100) - 1) * 100


def print_overview(priced: dict[str, dict]) -> None:
    errors = {k: r["error_pct"] for k, r in priced.items()}
    print(f"TensorRT-LLM v0.17 TP 1 FP8 rows ({SOURCE}): error %, and Mixtral over Mistral 7B / Llama 3.1 8B")
    for gpu, _ in GPUS:
        over = []
        for isl, osl in LENGTHS:
            e = {m: errors[f"{m}|{gpu[:4]}|{isl}/{osl}"] for m in TABLE}
            over.append(_ratio(e["Mixtral-8x7B"], e["Mistral-7B"]))
            print(f"  {gpu[:4]} {isl:>5}/{osl:<5} Mixtral {e['Mixtral-8x7B']:+6.1f}  Mistral 7B {e['Mistral-7B']:+6.1f}  "
                  f"Llama 3.1 8B {e['Llama-3.1-8B']:+6.1f}  | Mixtral / Mistral {over[-1]:+6.1f}  "
                  f"/ Llama {_ratio(e['Mixtral-8x7B'], e['Llama-3.1-8B']):+6.1f}")
        print(f"  {gpu[:4]} mean Mixtral / Mistral 7B {sum(over) / len(over):+.1f}%")


def print_mlperf(priced: dict[str, dict]) -> None:
    errors = {k: r["error_pct"] for k, r in priced.items()}
    print("NVIDIA MLPerf Offline: error %, Mixtral over Llama 2 70B on the same harness and GPUs")
    for label, _, mixtral, llama in MLPERF:
        print(f"  {label}: Mixtral {errors[mixtral]:+6.1f} ({mixtral})  Llama 2 70B {errors[llama]:+6.1f} ({llama})"
              f"  Mixtral / Llama 2 {_ratio(errors[mixtral], errors[llama]):+6.1f}")
    print("Mixtral Server rows: error % (priced load)")
    for _, ids in SERVER:
        for i in ids:
            print(f"  {i} {priced[i]['metric']:<20} {errors[i]:+7.1f}  ({priced[i]['priced_load']:.3f})")


def print_aic(paths: list[str]) -> None:
    """The priced routed-expert layer of the v0.17 TP 1 Mixtral deployment beside the measured 1.x module."""
    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from diag_step_terms import _steps

    from autotune.calibrate.serving_rows import case_from_row
    _, rows = overview_rows()
    for path in paths:
        d = pd.read_parquet(path)
        d = d[(d.hidden_size == 4096) & (d.inter_size == 14336) & (d.num_experts == 8) & (d.topk == 2)
              & (d.moe_tp_size == 1) & (d.moe_ep_size == 1) & (d.moe_dtype == "fp8")
              & (d.distribution == "power_law_1.2") & d.kernel_source.str.startswith("moe_torch_flow")]
        d = d.sort_values("num_tokens")
        gpu = next(g for g, _ in GPUS if g[:4].lower() in Path(path).name.lower())
        dep = case_from_row(next(r for r in rows if r["id"].startswith(f"Mixtral-8x7B|{gpu[:4]}"))).deployment
        print(f"{path}: routed-expert layer, ms (priced | aiconfigurator {d.version.iloc[0]} | priced / measured)")
        for n in (64, 256, 1024, 2048, 4096, 8192, 16384):
            step, bare = _steps(dep, n)
            priced = (step.linear_s[n] - bare.linear_s[n]) / step.num_layers * 1e3
            measured = float(np.interp(n, d.num_tokens, d.latency))
            print(f"  {n:>6} tokens: {priced:7.3f} | {measured:7.3f} | {priced / measured:5.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--price", help=argparse.SUPPRESS)
    parser.add_argument("--expert-scale", type=float, default=1.0)
    parser.add_argument("--mlperf", action="store_true")
    parser.add_argument("--aic", nargs="*", default=[])
    args = parser.parse_args(argv)
    if args.price:
        return _price_here(args.price, args.expert_scale)
    if args.expert_scale != 1.0:
        print(f"(sensitivity: every routed-expert layer's time x {args.expert_scale})")
    print_overview(price(*overview_rows(), args.expert_scale))
    if args.mlperf:
        print_mlperf(price(*mlperf_rows(), args.expert_scale))
    if args.aic:
        print_aic(args.aic)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
