"""One JSON report of scripts/gpu_check.sh: each run measured on this GPU beside autotune's prediction.

Reads ``autotune validate --json`` reports (the reference model's plans, runtime torch) and the
JSON lines of scripts/hf_bench.py (transformers models, runtime transformers), predicts every run
with the datasheet cluster and, when given, the profile just measured, and writes the GPU, the
software versions, the date, the runs and a summary (mean and worst step-time error, worst memory
error, and every run that ran out of memory although predicted to fit).

    python scripts/gpu_check_report.py --cluster dgx-h200 --validate v1.json v2.json --hf hf.jsonl \
        [--profile profile.json] [--environment env.json] --out gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autotune.cost.evaluate import evaluate_plan
from autotune.plan.builders import uniform_plan
from autotune.plan.io import model_from_dict, workload_from_dict
from autotune.plan.plan import Plan
from autotune.spec.hf_config import model_from_hf_config
from autotune.spec.resolve import resolve_cluster
from autotune.spec.runtime import load_runtime
from autotune.spec.workload import TrainingWorkload

SCHEMA = "autotune.gpu_check/1"
ROOT = Path(__file__).resolve().parent.parent


def _predict(model, workload, plan, runtime: str, cluster) -> dict[str, Any]:
    est = evaluate_plan(model, workload, cluster, plan, runtime=load_runtime(runtime))
    held = est.memory_breakdown["reserved_bytes"] + est.memory_breakdown["allocator_bytes"]
    return {"step_time_s": est.step_time_s, "peak_tensor_bytes": est.peak_memory_bytes_per_gpu - held,
            "peak_memory_bytes": est.peak_memory_bytes_per_gpu, "fits": est.fits, "memory_at_risk": est.memory_at_risk}


def _validate_runs(report: dict) -> list[dict]:
    runs = []
    for row in report.get("plans", []):
        runs.append({"name": Path(row["source"]).stem, "kind": "validate", "runtime": "torch", "status": row["status"],
                     "message": row.get("message", ""), "measured_step_time_s": row.get("measured_step_time_s"),
                     "peak_allocated_bytes": row.get("measured_peak_memory_bytes"), "peak_reserved_bytes": None,
                     "case": (model_from_dict(row["model"]), workload_from_dict(row["workload"]), Plan.from_dict(row["plan"]))})
    return runs


def _hf_runs(records: list[dict], configs: dict[str, str]) -> list[dict]:
    runs = []
    for rec in records:
        model = model_from_hf_config(configs[rec["name"]])
        case = None
        if "micro_batch" in rec:
            workload = TrainingWorkload(global_batch=rec["micro_batch"], seq_len=rec["seq_len"])
            case = (model, workload, uniform_plan(num_layers=model.num_layers, gpus=1, micro_batch=rec["micro_batch"],
                                                  global_batch=rec["micro_batch"],
                                                  recompute="full" if rec["checkpointing"] else "none"))
        runs.append({"name": rec["name"], "kind": "transformers", "runtime": "transformers",
                     "status": "failed" if "error" in rec else "ok", "message": rec.get("error", ""),
                     "measured_step_time_s": rec.get("step_s_median"), "peak_allocated_bytes": rec.get("peak_allocated_bytes"),
                     "peak_reserved_bytes": rec.get("peak_reserved_bytes"), "case": case})
    return runs


def _scored(run: dict, clusters: dict) -> dict:
    out = {k: v for k, v in run.items() if k != "case"}
    out["out_of_memory"] = "OutOfMemoryError" in run["message"] or "out of memory" in run["message"]
    out["predicted"], out["step_error_pct"], out["memory_error_pct"] = {}, {}, {}
    if run["case"] is None:
        return out
    for label, cluster in clusters.items():
        pred = out["predicted"][label] = _predict(*run["case"], run["runtime"], cluster)
        if run["status"] == "ok" and run["measured_step_time_s"]:
            out["step_error_pct"][label] = 100.0 * (pred["step_time_s"] / run["measured_step_time_s"] - 1.0)
            out["memory_error_pct"][label] = 100.0 * (pred["peak_tensor_bytes"] / run["peak_allocated_bytes"] - 1.0)
    return out


def _summary(runs: list[dict], labels) -> dict:
    summary: dict[str, Any] = {}
    for label in labels:
        steps = [abs(r["step_error_pct"][label]) for r in runs if label in r["step_error_pct"]]
        memory = [abs(r["memory_error_pct"][label]) for r in runs if label in r["memory_error_pct"]]
        summary[label] = {"runs": len(steps), "step_mae_pct": sum(steps) / len(steps) if steps else None,
                          "step_worst_pct": max(steps, default=None), "memory_worst_pct": max(memory, default=None),
                          "out_of_memory_predicted_to_fit": [r["name"] for r in runs if r["out_of_memory"]
                                                             and r["predicted"].get(label, {}).get("fits")]}
    return summary


def build_report(*, cluster: str, validate_reports: list[dict], hf_records: list[dict], hf_configs: dict[str, str],
                 profile: str | None = None, environment: dict | None = None) -> dict:
    clusters = {"datasheet": resolve_cluster(cluster)}
    if profile:
        clusters["profile"] = resolve_cluster(cluster, profile=profile)
    cases = [run for report in validate_reports for run in _validate_runs(report)] + _hf_runs(hf_records, hf_configs)
    runs = [_scored(run, clusters) for run in cases]
    return {"schema": SCHEMA, "cluster": cluster, "profile": profile, "environment": environment or {},
            "runs": runs, "summary": _summary(runs, clusters)}


def trace_summary(trace: dict) -> dict:
    """Per traced case: wall and busy seconds, launches and each kernel name's launches and time
    (the kernel-by-kernel sequence is left in the trace file)."""
    keep = ("wall_unprofiled_s", "busy_us", "launches", "peak_allocated_bytes", "summary", "error")
    return {name: {k: v for k, v in case.items() if k in keep} for name, case in trace.get("cases", {}).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--validate", nargs="*", default=[], type=Path)
    parser.add_argument("--hf", type=Path, default=None)
    parser.add_argument("--cases", type=Path, default=ROOT / "scripts" / "gpu_check_cases.json")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--environment", type=Path, default=None)
    parser.add_argument("--trace", type=Path, default=None, help="scripts/gpu_trace.py's JSON: each case's busy time kept")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    reports = [json.loads(p.read_text()) for p in args.validate if p.is_file()]
    records = [json.loads(line) for line in args.hf.read_text().splitlines() if line.strip()] if args.hf and args.hf.is_file() else []
    configs = {c["name"]: str(ROOT / c["config"]) for c in json.loads(args.cases.read_text())}
    profile = args.profile if args.profile and Path(args.profile).is_file() else None
    environment = json.loads(args.environment.read_text()) if args.environment and args.environment.is_file() else {}
    report = build_report(cluster=args.cluster, validate_reports=reports, hf_records=records, hf_configs=configs,
                          profile=profile, environment=environment)
    if args.trace and args.trace.is_file():
        report["traces"] = trace_summary(json.loads(args.trace.read_text()))
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
