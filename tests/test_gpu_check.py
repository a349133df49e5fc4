"""scripts/gpu_check.sh's report, built here from the H200 runs as the script's parts write them
(validate reports, hf_bench.py lines): every run beside the prediction, and the plan that ran out
of memory not predicted to fit."""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from autotune.plan.io import read_plan_file

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "data" / "h200"
sys.path.insert(0, str(ROOT / "scripts"))
from gpu_check_report import build_report  # noqa: E402


def _inputs():
    runs = json.loads((H200 / "runs.json").read_text())["runs"]
    plans = []
    for run in (r for r in runs if r["kind"] == "validate"):
        plan_file = read_plan_file(H200 / run["plan"])
        plans.append({"source": run["plan"], "status": run["status"], "message": run["message"],
                      "measured_step_time_s": run["measured_step_time_s"],
                      "measured_peak_memory_bytes": run["peak_allocated_bytes"], "plan": plan_file.plan.to_dict(),
                      "model": asdict(plan_file.model), "workload": asdict(plan_file.workload)})
    hf = [{"name": r["name"], "micro_batch": r["micro_batch"], "seq_len": r["seq_len"], "checkpointing": r["checkpointing"],
           "step_s_median": r["measured_step_time_s"], "peak_allocated_bytes": r["peak_allocated_bytes"],
           "peak_reserved_bytes": r["peak_reserved_bytes"]} for r in runs if r["kind"] == "transformers"]
    cases = json.loads((ROOT / "scripts" / "gpu_check_cases.json").read_text())
    configs = {c["name"]: str(ROOT / c["config"]) for c in cases}
    return [json.loads(json.dumps({"plans": plans}))], hf, configs  # as the files hold them


def test_report_puts_every_run_beside_its_prediction():
    reports, hf, configs = _inputs()
    # the script trains the cases the H200 measured, and OLMoE, Qwen3-1.7B and Gemma-2-2B, which no given run measured
    assert set(configs) - {r["name"] for r in hf} == {"olmoe-1b-7b_mb1_s2048", "qwen3-1.7b_mb4_s2048", "gemma-2-2b_mb2_s4096"}
    profile = str(ROOT / "autotune" / "data" / "devices" / "h200-measured.json")
    report = build_report(cluster="dgx-h200", validate_reports=reports, hf_records=hf, hf_configs=configs, profile=profile)
    by_name = {r["name"]: r for r in report["runs"]}
    assert len(by_name) == 9 and set(by_name["a-gpt13-mb8-none"]["predicted"]) == {"datasheet", "profile"}
    assert by_name["z-llama8b"]["out_of_memory"] and not by_name["z-llama8b"]["predicted"]["datasheet"]["fits"]
    for label in ("datasheet", "profile"):
        summary = report["summary"][label]
        assert summary["runs"] == 7 and summary["out_of_memory_predicted_to_fit"] == []
        assert summary["step_worst_pct"] < 20 and summary["memory_worst_pct"] < 5
    json.dumps(report)  # one JSON document


def test_the_script_is_valid_shell_and_names_its_parts():
    script = ROOT / "scripts" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    for part in ("autotune profile", "autotune validate", "hf_bench.py", "gpu_trace.py", "gpu_check_report.py"):
        assert part in text
    for plan in ("a-", "c-", "d-", "e-"):
        assert any((H200 / "plans").glob(f"{plan}*.json"))


def test_the_moe_case_is_predicted_from_its_operator_stream():
    # the OLMoE case gpu_check.sh adds: transformers' model of that config is the stream's architecture
    from autotune.graph.opstream import stream_for
    from autotune.spec.hf_config import model_from_hf_config
    from autotune.graph.table import model_tables
    case = next(c for c in json.loads((ROOT / "scripts" / "gpu_check_cases.json").read_text()) if "olmoe" in c["name"])
    model = model_from_hf_config(str(ROOT / case["config"]))
    assert stream_for(model, "transformers") == "transformers-olmoe"
    # transformers 5.17's OlmoeForCausalLM of this config, its parameters counted on the meta device
    assert model_tables(model, 2048, 2).num_params == 6_919_161_856
    report = build_report(cluster="dgx-h200", validate_reports=[], hf_configs={case["name"]: str(ROOT / case["config"])},
                          hf_records=[{"name": case["name"], "micro_batch": 1, "seq_len": 2048, "checkpointing": False,
                                       "error": "not run here"}], profile=None)
    (run,) = report["runs"]
    assert run["status"] == "failed" and run["predicted"]["datasheet"]["fits"]
