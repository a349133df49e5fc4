"""`autotune check-published` on serving CSVs: every row priced by its engine and cells, or a reason."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.calibrate.serving_published import check_serving_csv, check_serving_rows, summarise
from autotune.calibrate.serving_names import _PRECISIONS
from autotune.calibrate.serving_rows import RowProblem, case_from_row, engine_runtime
from autotune.calibrate.serving_systems import PublishedSystem, _systems
from autotune.errors import AutotuneError
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

DATA = Path(__file__).parent / "data" / "serving_runs.csv"


def _rows(*ids: str) -> list[dict]:
    with open(DATA, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r for r in rows if r["id"] in ids] if ids else rows


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", "check-published", *args], capture_output=True, text=True,
                          timeout=600)


def test_a_row_is_read_from_its_own_cells():
    case = case_from_row(_rows("trt017-013")[0])
    dep = case.deployment
    assert (dep.runtime.name, dep.model.name, dep.cluster.name, dep.tp, dep.replicas, dep.dtype) == \
        ("tensorrt-llm-0.17", "llama3-70b", "dgx-h100", 4, 1, "fp8")
    assert (case.load.kind, case.load.num_requests, case.load.input_len, case.load.output_len) == \
        ("max_throughput", 3000, 128, 2048)
    assert case.scope == "replica" and case.metric == "output_tokens_per_s"
    vllm = case_from_row(_rows("sgl060-009")[0])
    assert vllm.deployment.runtime.serving.scheduler_steps == 10  # --num-scheduler-steps 10 from its notes
    row = _rows("sgl060-009")[0]
    launched = case_from_row(dict(row, notes=row["notes"] + "; vLLM with --max_model_len 4096"))
    assert launched.deployment.runtime.serving.max_model_len == 4096  # a launch's --max_model_len from the notes
    assert vllm.deployment.runtime.serving.max_model_len == 0  # its notes state none: the model's context
    assert (vllm.load.kind, vllm.load.rate_per_s, vllm.load.num_requests) == ("rate", 4.0, 1200)
    assert vllm.unit_to_si == 1e-3 and any("sharegpt" in a for a in vllm.assumed)


def _limits(case):
    from autotune.cost.serving_eval import replica_step_model
    from autotune.cost.serving_limits import engine_limits

    dep = case.deployment
    probe = replica_step_model(dep, max_tokens=1, max_sampled=1)
    return engine_limits(dep.runtime.serving, dep.model, dep.cluster, tp=dep.tp, weight_dtype=dep.dtype,
                         weight_bytes_per_gpu=probe.weight_bytes_per_gpu,
                         kv_bytes_per_token_per_gpu=probe.kv_bytes_per_token_per_gpu,
                         input_len=case.load.input_len, output_len=case.load.output_len)


def test_launch_flags_in_the_notes_replace_the_engines_own_limits_and_kv_dtype():
    row = _rows("sgl060-009")[0]  # vLLM 0.6, BF16 Llama 3.1 8B: max_num_seqs 256, BF16 KV cache by default
    plain = case_from_row(row)
    flagged = case_from_row(dict(row, notes=row["notes"] + "; vllm serve --max-num-seqs 64 "
                                 "--max-num-batched-tokens 4096 --kv-cache-dtype fp8"))
    before, after = _limits(plain), _limits(flagged)
    assert before.max_num_seqs == 256 and (after.max_num_seqs, after.max_num_batched_tokens) == (64, 4096)
    assert after.kv_capacity_tokens > 1.9 * before.kv_capacity_tokens  # one byte a KV element, not two
    assert any("launch_max_num_seqs 64 (the row's notes)" == a for a in flagged.assumed)
    trt = _rows("trt017-013")[0]  # trtllm-bench's heuristic picks the limits unless the launch states them
    bench = _limits(case_from_row(trt))
    stated = _limits(case_from_row(dict(trt, notes=trt["notes"] + "; trtllm-bench --max_batch_size 128")))
    assert bench.max_num_seqs != 128 and stated.max_num_seqs == 128
    assert stated.max_num_batched_tokens == bench.max_num_batched_tokens


def test_an_mlperf_row_takes_its_systems_published_config_and_its_datasets_means():
    """mlp41-002 states neither TP, precision nor lengths: NVIDIA's v4.1 Server config for 8 H100s
    (TP 2 x 4 instances, FP8, batch 1024, 4096 tokens a step) and OpenOrca's means fill them."""
    case = case_from_row(_rows("mlp41-002")[0])
    dep, engine = case.deployment, case.deployment.runtime.serving
    assert (dep.tp, dep.replicas, dep.dtype) == (2, 4, "fp8")
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (1024, 4096)
    assert (case.load.input_len, case.load.output_len) == (222, 294)
    assert any("H100_SXM_80GB_TP2x4" in a for a in case.assumed)
    offline = case_from_row(_rows("mlp41-001")[0]).deployment.runtime.serving
    assert offline.max_num_seqs == 896  # the Offline config's gpu_batch_size, not the Server one's
    own = case_from_row(dict(_rows("mlp41-002")[0], tp="8", dp="1", precision="fp16"))
    assert (own.deployment.tp, own.deployment.dtype) == (8, "fp16")  # the row's cells win
    four = case_from_row(dict(_rows("mlp41-009")[0], gpus="4"))  # no config for 4 GPUs: four of the x8's instances
    assert (four.deployment.tp, four.deployment.replicas) == (1, 4)
    assert any("as 4 of its instances" in a for a in four.assumed)
    alone = case_from_row(dict(_rows("mlp41-009")[0], gpu="A100-SXM-80GB", gpus="4"))  # no entry for the GPU
    assert alone.deployment.tp == 4 and any(a.startswith("tp 4 (no degree stated") for a in alone.assumed)
    with pytest.raises(RowProblem, match="tensor-parallel"):  # nor a degree that divides them
        case_from_row(dict(_rows("mlp41-009")[0], gpu="A100-SXM-80GB", gpus="4", dp="3"))
    with pytest.raises(RowProblem, match="tp 1 x dp 3 does not make the 4 GPUs"):  # the row's dp against the instances
        case_from_row(dict(_rows("mlp41-009")[0], gpus="4", dp="3"))


def test_mixtral_and_b200_rows_price_from_their_published_settings():
    mixtral = case_from_row(_rows("mlp41-011")[0])
    assert (mixtral.deployment.tp, mixtral.deployment.replicas, mixtral.deployment.dtype) == (1, 8, "fp8")
    assert (mixtral.load.input_len, mixtral.load.output_len) == (427, 145)
    assert mixtral.deployment.runtime.serving.max_num_seqs == 1200
    b200 = case_from_row(_rows("mlp41-014")[0])  # Offline with no sample count: mlperf.conf's minimum
    assert (b200.deployment.tp, b200.deployment.dtype) == (1, "nvfp4")
    # LoadGen's Offline query outlasts min_duration (1.1 x 2,400 s x the system's 38/s: 100,320 samples, its
    # log's samples_per_query), not the 24,576-sample set mlperf.conf's min_query_count names
    assert (b200.load.kind, b200.load.num_requests) == ("max_throughput", 100320)
    assert any("LoadGen's Offline query of 100320 samples" in a for a in b200.assumed)


def test_an_mlperf_row_with_its_lengths_is_priced_per_instance():
    """MLPerf's Server rows: the system's QPS split over its instances, LoadGen's ns, the system's tokens/s."""
    server = dict(_rows("mlp41-006")[0], isl="300", osl="294")
    case = case_from_row(server)
    assert (case.deployment.tp, case.deployment.replicas, case.deployment.dtype) == (1, 8, "fp8")
    assert case.load.kind == "rate" and case.load.rate_per_s == pytest.approx(101 / 8)
    assert case.scope == "system" and case.deployment.runtime.name == "mlperf-nvidia-4.1"
    latency = case_from_row(dict(_rows("mlp41-007")[0], isl="300", osl="294"))
    assert latency.unit_to_si == 1e-9 and latency.metric == "ttft_mean"


def test_a_server_row_runs_as_long_as_its_loadgen_settings_say():
    """LoadGen's min_duration (2,400 s, the mlperf-nvidia-4.1 harness) at the target QPS issues 180,000
    queries on 8 H100s, 45,000 a TP-2 instance (not the 24,576-sample set they are drawn from); the
    simulation stops at MAX_RATE_REQUESTS. A min_duration in the row's notes overrides the harness's."""
    from autotune.calibrate.serving_rows import MAX_RATE_REQUESTS, RATE_REQUESTS

    assert load_runtime("mlperf-nvidia-4.1").serving.rate_run_s == 2400
    row = _rows("mlp41-003")[0]
    case = case_from_row(row)
    assert case.load.num_requests == MAX_RATE_REQUESTS
    assert any("of the run's 45000 requests" in a for a in case.assumed)
    short = case_from_row(dict(row, notes=row["notes"] + "; min_duration (ms): 60000"))
    assert short.load.num_requests == 75 * 60 // 4  # 4,500 queries, a quarter each
    # TensorRT-LLM's benchmark states no run length: its notes' 500 requests, else RATE_REQUESTS
    assert case_from_row(_rows("trtsrv-001")[0]).load.num_requests == 500
    assert case_from_row(dict(_rows("trtsrv-001")[0], notes="online serving")).load.num_requests == RATE_REQUESTS


def test_every_published_system_names_a_real_runtime_model_and_precision():
    for system in _systems():
        runtime = load_runtime(system.runtime)
        assert resolve_model(system.model).name == system.model
        if system.get("precision"):
            assert _PRECISIONS[str(system.get("precision"))] in runtime.serving.weight_dtypes
    with pytest.raises(AutotuneError, match="scenario"):
        PublishedSystem(runtime="x", model="y", gpu="z", gpus=1, scenario="batch", config="c", values=(), sources=())


def test_versions_resolve_to_the_newest_preset_not_newer_than_the_row():
    assert engine_runtime("vllm", "0.6.0").name == "vllm-0.6"
    assert engine_runtime("vllm", "0.6.3").name == "vllm-0.6"
    assert engine_runtime("vllm", "0.40").name == "vllm"
    assert engine_runtime("tensorrt-llm", "0.14.0 (Triton tensorrtllm_backend)").name == "tensorrt-llm-0.14"
    assert engine_runtime("tensorrt-llm", "0.17 (TensorRT engine)").name == "tensorrt-llm-0.17"
    assert engine_runtime("sglang", "0.4.1").name == "sglang-0.4"
    with pytest.raises(RowProblem, match="engine"):
        engine_runtime("ollama", "1.0")


def test_unpriceable_rows_say_why_and_others_still_price():
    good = _rows("trtsrv-001")[0]
    bad = [dict(good, id="x1", model="Falcon-180B", hf_model_id=""), dict(good, id="x2", gpu="MI300X"),
           dict(good, id="x3", tp="", gpus="4", dp="3"), dict(good, id="x4", metric="joules_per_token"),
           dict(good, id="x5", concurrency_or_batch="whatever"), dict(good, id="x6", value="n/a"),
           dict(good, id="x7", pp="2", gpus="8", tp="4", ep="8")]
    checks = {c.row_id: c for c in check_serving_rows([good, *bad])}
    assert checks["trtsrv-001"].error_pct is not None
    reasons = {k: c.reason for k, c in checks.items() if k != "trtsrv-001"}
    assert all(c.error_pct is None for k, c in checks.items() if k != "trtsrv-001")
    assert "model preset" in reasons["x1"] and "GPU" in reasons["x2"] and "tensor-parallel" in reasons["x3"]
    assert "metric" in reasons["x4"] and "load" in reasons["x5"] and "number" in reasons["x6"]
    assert "pp 2 with expert parallelism" in reasons["x7"]  # pp serving is priced, not with EP over tp x dp


def test_json_gives_every_row_and_the_summaries(tmp_path):
    path = tmp_path / "few.csv"
    rows = _rows("trt017-009", "sgl060-001", "sgl060-002") + [dict(_rows("mlp41-009")[0], gpu="A100-SXM-80GB", gpus="4", dp="3")]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = _cli(str(path), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["id"] for r in data["rows"]] == [r["id"] for r in rows]  # the file's order
    for row in data["rows"]:
        assert {"id", "metric", "measured", "predicted", "error_pct", "reason"} <= set(row)
    unpriced = next(r for r in data["rows"] if r["id"] == "mlp41-009")
    assert unpriced["predicted"] is None and unpriced["error_pct"] is None and "tensor-parallel" in unpriced["reason"]
    assert data["rows"][0]["error_pct"] == pytest.approx(
        100 * (data["rows"][0]["predicted"] - 911.62) / 911.62)
    groups = {g["group"] for g in data["summary"]}
    assert "tensorrt-llm | H100-SXM-80GB | output_tokens_per_s" in groups and "sglang | H100-80GB | ttft_median" in groups
    assert (data["priced"], data["not_priced"]) == (3, 1)


def test_a_file_without_the_columns_is_refused():
    out = _cli(str(DATA.parent / "published_runs.csv"), str(DATA))
    assert out.returncode == 2 and "not both" in out.stderr
    assert _cli("/nonexistent.csv").returncode == 2


@pytest.mark.slow
def test_the_shipped_rows_reach_the_recorded_figures():
    """The figures docs/serving.md reports: every row priced (its cells, the dataset and system tables),
    and the errors per engine and kind: the issue's 15% / 20% targets where they are met (TensorRT-LLM
    throughput, SGLang and vLLM latency), a regression guard elsewhere."""
    checks = check_serving_csv(DATA)
    priced = [c for c in checks if c.error_pct is not None]
    assert len(priced) == len(checks) == 83
    groups = {g.group: g for g in summarise(checks, "engine,kind")}
    assert groups["tensorrt-llm | throughput"].mean_abs_error_pct < 12.0
    # regression guard: SGLang 0.3 and vLLM 0.6 at rate inf over ShareGPT (+16.8% and +33.3% with the
    # host time per sequence, cost/serving_host.py; +25.2% and +33.5% before it; +35.5% and +45.5% at the
    # means; SGLang +6.2% when it was admitted on prompts alone and recomputed 0.86 M prompt tokens); vLLM
    # +28.7% once a request finishing on a call's last step holds its slot one scheduling (Schedule.late_finish),
    # +27.2% with the sampler's passes over the logits (cost/serving_sampler.py)
    assert groups["sglang | throughput"].mean_abs_error_pct < 20.0
    assert groups["vllm | throughput"].mean_abs_error_pct < 29.0
    # SGLang 0.3's TTFTs wait for its eager prompt issue (19.6% before its own operator cost, 10.2% with it)
    assert groups["sglang | latency"].mean_abs_error_pct < 12.0
    # 19.75% before NCCL's measured sweep above vLLM's 8 MiB custom all-reduce (cost/serving_nccl.py), 20.15%
    # with it: the sweep prices 4 H100's large all-reduces 10-30% slower than the formula, and vLLM 0.6's
    # ITL median at 4 RPS (sgl060-009) drops from -8.4% to -12.2% as the batches regroup around them; 19.3%
    # with vLLM 0.6's sampler (a float32 copy, both softmaxes and the gather every step: sgl060-009 -8.2%)
    assert groups["vllm | latency"].mean_abs_error_pct < 20.0
    assert groups["tensorrt-llm | latency"].mean_abs_error_pct < 25.0
    assert groups["mlperf-nvidia | throughput"].mean_abs_error_pct < 12.0
    # regression guard: LoadGen's run length (60.9% at 2,000 requests an instance)
    assert groups["mlperf-nvidia | latency"].mean_abs_error_pct < 58.0
