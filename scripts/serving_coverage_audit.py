"""Coverage audit of "every row priced": synthetic serving rows in the check files' schema, run through
check-published's own reader and pricer, and every refusal listed with its reason.

The rows cross the GPUs (H100, H200, B200, GB200, B300, GB300), the models of the newer sources (DeepSeek-R1/V3,
gpt-oss 20B/120B, Qwen3 30B-A3B/235B-A22B, Llama 4 Scout/Maverick, Llama 3.x) in their published checkpoints
(BF16, FP8, NVFP4, MXFP4), tensor / expert / attention-data parallel layouts, engine releases from 2024 to 2026
(TensorRT-LLM, vLLM, SGLang) and three loads (a fixed concurrency, a request rate, maximum throughput); MLPerf
rows are the check files' own rows with their GPU and harness release swapped. Every cell is spelled as a real
row of tests/data/*_check.csv or mlperf_*.csv spells it; a row's value is a placeholder, so a priced row says
only that the row is read and simulated, not how close it comes.

    python scripts/serving_coverage_audit.py                 # read every row (case_from_row): the cheap refusals
    python scripts/serving_coverage_audit.py --price         # and simulate them (check_serving_rows): all refusals
    python scripts/serving_coverage_audit.py --price --one-per-preset --engine sglang --csv /tmp/refusals.csv

Output: the refusals grouped by reason (numbers folded), each group's count and a few row ids; --csv writes
every refused row with its reason."""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.calibrate.serving_published import check_serving_rows  # noqa: E402
from autotune.calibrate.serving_rows import COLUMNS, RowProblem, case_from_row, engine_runtime  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402

DATA = ROOT / "tests" / "data"
# the GPU cells as the check files spell them, with the GPUs an 8-GPU HGX node or a 4-GPU NVL72 tray gives
GPUS = {"H100": ("H100-SXM-80GB", 8), "H200": ("H200-SXM-141GB", 8), "B200": ("B200-SXM-180GB", 8),
        "GB200": ("GB200-186GB", 4), "B300": ("B300", 8), "GB300": ("GB300-288GB", 4)}
# releases as the check files spell them: each preset's first release and the releases flags key on
ENGINES = {
    "tensorrt-llm": ("0.14.0 (Triton tensorrtllm_backend)", "0.17 (TensorRT engine via trtllm-bench build --quantization FP8)",
                     "0.18.2", "0.19.0 (PyTorch backend, trtllm-bench)", "0.20.0 (PyTorch backend, trtllm-bench)",
                     "0.21.0 (PyTorch backend, trtllm-bench)", "1.0 (PyTorch backend, trtllm-bench)",
                     "1.1.0 (PyTorch backend, trtllm-bench)", "1.2.0"),
    "vllm": ("0.6.0", "0.7.3", "0.8.5", "0.9.0", "0.9.2", "0.10.2", "0.11.0", "0.13.0", "0.14.0", "0.18.0", "v0.20.2", "0.33"),
    "sglang": ("0.3.6", "0.4.0", "0.4.6", "0.4.7", "0.4.9", "0.4.10", "0.5.0rc2", "0.5.2", "0.5.5", "0.5.6", "0.5.7",
               "0.5.12", "0.5.23"),
}
# (model cell, hf_model_id, arch, precision, layouts): the published checkpoints; a layout is (kind, GPUs),
# kind tp (tensor parallel), tep (experts over the tp group), dep (attention data-parallel, experts over the GPUs)
MODELS = (
    ("DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1-0528", "moe", "fp8", (("tp", 8), ("tep", 8), ("dep", 8))),
    ("DeepSeek-R1-0528-FP4-V2", "nvidia/DeepSeek-R1-0528-FP4-v2", "moe", "fp4", (("tp", 4), ("tep", 8), ("dep", 8))),
    ("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "moe", "fp8", (("tp", 8), ("dep", 8))),
    ("gpt-oss-120b", "openai/gpt-oss-120b", "moe", "mxfp4", (("tp", 1), ("tp", 2), ("tep", 4), ("dep", 4), ("tp", 8))),
    ("gpt-oss-20b", "openai/gpt-oss-20b", "moe", "mxfp4", (("tp", 1), ("tp", 2))),
    ("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Instruct-2507", "moe", "bf16", (("tp", 1), ("tep", 2))),
    ("Qwen3-30B-A3B-FP8", "Qwen/Qwen3-30B-A3B-FP8", "moe", "fp8", (("tp", 1), ("dep", 2))),
    ("Qwen3-30B-A3B", "nvidia/Qwen3-30B-A3B-FP4", "moe", "fp4", (("tp", 1),)),
    ("Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-Instruct-2507", "moe", "bf16", (("tp", 8), ("tep", 8))),
    ("Qwen3-235B-A22B", "nvidia/Qwen3-235B-A22B-FP8", "moe", "fp8", (("tp", 4), ("tep", 8), ("dep", 8))),
    ("Qwen3-235B-A22B", "nvidia/Qwen3-235B-A22B-FP4", "moe", "fp4", (("tp", 4), ("dep", 4))),
    ("Llama-4-Scout-17B-16E-Instruct", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "moe", "bf16", (("tp", 2), ("tp", 8))),
    ("Llama-4-Maverick-17B-128E", "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "moe", "fp8", (("tp", 8), ("tep", 8))),
    ("Llama-4-Maverick-17B-128E", "nvidia/Llama-4-Maverick-17B-128E-Instruct-NVFP4", "moe", "nvfp4", (("tp", 4), ("tep", 8))),
    ("Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", "dense", "bf16", (("tp", 1),)),
    ("Llama-3.1-8B", "nvidia/Llama-3.1-8B-Instruct-FP8", "dense", "fp8", (("tp", 1),)),
    ("Llama-3.3-70B", "nvidia/Llama-3.3-70B-Instruct-FP8", "dense", "fp8", (("tp", 1), ("tp", 2), ("tp", 8))),
    ("Llama-3.3-70B", "nvidia/Llama-3.3-70B-Instruct-FP4", "dense", "fp4", (("tp", 1), ("tp", 4))),
    ("Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct", "dense", "bf16", (("tp", 4), ("tp", 8))),
    ("Llama-3.1-405B", "nvidia/Llama-3.1-405B-Instruct-FP8", "dense", "fp8", (("tp", 8),)),
    ("Llama-3.1-405B", "nvidia/Llama-3.1-405B-Instruct-FP4", "dense", "fp4", (("tp", 4), ("tp", 8))),
)
# the loads as each engine's benchmark spells them (trtllm-bench: max load; vllm / sglang bench serve: request rate inf)
LOADS = {"concurrency": "concurrency 64", "rate": "request rate 4 RPS, 1200 prompts", "max": "request rate inf, 1000 prompts"}
TRTLLM_MAX = "max load (infinite request rate); num_requests=1000"
# the metrics a load's row reports, with the check files' units
METRICS = {"concurrency": (("output_tokens_per_s", "tokens/s/gpu"), ("tpot_mean", "ms"), ("ttft_mean", "ms")),
           "rate": (("output_tokens_per_s", "tokens/s/gpu"), ("ttft_mean", "ms")), "max": (("output_tokens_per_s", "tokens/s/gpu"),)}
MLPERF_FILES = ("mlperf_v5_1_nvidia.csv", "mlperf_v5_0_nvidia.csv", "mlperf_v5_1_gb300.csv")
MLPERF_HARNESSES = ("MLPerf v4.1 NVIDIA TensorRT-LLM harness; TensorRT 10.2.0, CUDA 12.4",
                    "MLPerf v5.0 NVIDIA TensorRT-LLM harness; TensorRT 10.8, CUDA 12.8",
                    "MLPerf v5.1 NVIDIA TensorRT-LLM harness; TensorRT-LLM 18c0333e, TensorRT 10.11, CUDA 12.9")
SOURCE = "synthetic (scripts/serving_coverage_audit.py): value is a placeholder, not a measurement"


def layout_cells(kind: str, gpus: int) -> dict:
    """The gpus / tp / ep / dp cells and the notes a layout's rows carry (tp, TEP, DEP as the check rows spell them)."""
    if kind == "tp":
        return {"gpus": str(gpus), "tp": str(gpus), "pp": "1", "ep": "", "dp": "", "notes": f"TP{gpus}"}
    if kind == "tep":
        return {"gpus": str(gpus), "tp": str(gpus), "pp": "1", "ep": str(gpus), "dp": "", "notes": f"TEP{gpus}: attention tensor-parallel"}
    return {"gpus": str(gpus), "tp": str(gpus), "pp": "1", "ep": str(gpus), "dp": str(gpus),
            "notes": f"DEP{gpus}: attention DP over the {gpus} ranks, experts over the {gpus} GPUs"}


def engine_rows(engine: str, version: str, gpu: str, isl: int = 1024, osl: int = 1024) -> list[dict]:
    """Every model x layout x load x metric row of one engine release on one GPU."""
    rows = []
    for model, hf_id, arch, precision, layouts in MODELS:
        for kind, gpus in layouts:
            for load, text in LOADS.items():
                text = TRTLLM_MAX if (load == "max" and engine == "tensorrt-llm") else text
                for metric, unit in METRICS[load]:
                    rows.append(dict(layout_cells(kind, gpus), model=model, hf_model_id=hf_id, arch=arch, params_b="",
                                     gpu=GPUS[gpu][0], precision=precision, engine=engine, engine_version=version,
                                     isl=str(isl), osl=str(osl), concurrency_or_batch=text, metric=metric, value="1",
                                     unit=unit, source=SOURCE))
    return rows


def mlperf_rows(gpu: str) -> list[dict]:
    """The MLPerf check files' rows, one a benchmark x scenario x metric, on ``gpu`` (its node or tray of GPUs) under
    each harness release."""
    rows, seen = [], set()
    for name in MLPERF_FILES:
        with open(DATA / name, newline="") as handle:
            for row in csv.DictReader(handle):
                key = (row["model"], row["concurrency_or_batch"].split(",")[0], row["metric"])
                if key in seen:
                    continue
                seen.add(key)
                cell, gpus = GPUS[gpu]
                for harness in MLPERF_HARNESSES:
                    rows.append(dict(row, gpu=cell, gpus=str(gpus), engine_version=harness, value="1",
                                     unit=re.sub(r"\(\d+-GPU system\)", f"({gpus}-GPU system)", row["unit"]),
                                     notes=re.sub(r"system \S+", "system (synthetic)", row["notes"]), source=SOURCE))
    return rows


def releases(engine: str, one_per_preset: bool, newest: int = 0) -> list[str]:
    """The releases audited: all listed, or the first listed of each preset; ``newest``: only the last so many."""
    versions, presets = [], set()
    for version in ENGINES[engine]:
        preset = engine_runtime(engine, version).name
        if not one_per_preset or preset not in presets:
            versions.append(version)
            presets.add(preset)
    return versions[-newest:] if newest else versions


def all_rows(engines: tuple[str, ...], gpus: tuple[str, ...], one_per_preset: bool, newest: int = 0) -> list[dict]:
    """The audit's rows, numbered (releases: see ``releases``; MLPerf: every harness)."""
    rows = []
    for engine in engines:
        if engine == "mlperf-nvidia":
            rows += [r for g in gpus for r in mlperf_rows(g)]
            continue
        rows += [r for v in releases(engine, one_per_preset, newest) for g in gpus for r in engine_rows(engine, v, g)]
    return [dict(r, id=f"cov-{n:05d}") for n, r in enumerate(rows, start=1)]


def refusals(rows: list[dict], price: bool) -> list[tuple[dict, str]]:
    """(row, reason) for each row not priced: read only (case_from_row), or read and simulated (check_serving_rows)."""
    if price:  # one check a row, in the rows' order
        return [(row, c.reason) for row, c in zip(rows, check_serving_rows(rows), strict=True) if c.predicted is None]
    refused = []
    for row in rows:
        try:
            case_from_row(row)
        except (RowProblem, AutotuneError) as err:
            refused.append((row, str(err)))
    return refused


def reason_key(reason: str) -> str:
    """A refusal's reason with its numbers folded, so that one cause is one group."""
    return re.sub(r"(?<![A-Za-z\d.])\d+(?:\.\d+)*(?![A-Za-z\d])", "N", reason)[:220]


def report(rows: list[dict], refused: list[tuple[dict, str]], out=sys.stdout) -> None:
    """The refusals grouped by reason: count, the engines / GPUs / models involved and a few ids."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row, reason in refused:
        groups[reason_key(reason)].append(row)
    print(f"{len(rows)} rows, {len(rows) - len(refused)} priced, {len(refused)} refused in {len(groups)} reasons", file=out)
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        engines = sorted({f"{r['engine']} {r['engine_version'].split(' ')[0]}" for r in members})
        gpus, models = sorted({r["gpu"] for r in members}), sorted({f"{r['model']} {r['precision']}" for r in members})
        print(f"\n[{len(members)}] {key}\n   engines: {', '.join(engines)}\n   gpus: {', '.join(gpus)}\n"
              f"   models: {', '.join(models)}\n   e.g. {', '.join(r['id'] for r in members[:4])}", file=out)


def write_csv(path: str, refused: list[tuple[dict, str]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", *[c for c in COLUMNS if c != "id"], "reason"], extrasaction="ignore")
        writer.writeheader()
        for row, reason in refused:
            writer.writerow(dict(row, reason=reason))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--price", action="store_true", help="simulate every row read (slow), not only read it")
    parser.add_argument("--engine", action="append", choices=[*ENGINES, "mlperf-nvidia"], help="only this engine (repeatable)")
    parser.add_argument("--gpu", action="append", choices=list(GPUS), help="only this GPU (repeatable)")
    parser.add_argument("--model", default="", help="only rows whose hf_model_id contains this text")
    parser.add_argument("--one-per-preset", action="store_true", help="one release a preset (its first listed)")
    parser.add_argument("--newest", type=int, default=0, help="only an engine's last N releases audited")
    parser.add_argument("--load", choices=list(LOADS), help="only this load's rows (MLPerf rows are kept)")
    parser.add_argument("--csv", default="", help="write the refused rows and reasons here")
    args = parser.parse_args(argv)
    engines = tuple(args.engine or (*ENGINES, "mlperf-nvidia"))
    rows = all_rows(engines, tuple(args.gpu or GPUS), args.one_per_preset, args.newest)
    rows = [r for r in rows if args.model.lower() in r["hf_model_id"].lower()]
    if args.load:
        texts = {LOADS[args.load], TRTLLM_MAX if args.load == "max" else LOADS[args.load]}
        rows = [r for r in rows if r["engine"] == "mlperf-nvidia" or r["concurrency_or_batch"] in texts]
    refused = refusals(rows, args.price)
    report(rows, refused)
    if args.csv:
        write_csv(args.csv, refused)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
