"""MLPerf Inference v5.0 rows (NVIDIA's April 2025 closed results: llama2-70b, llama2-70b-interactive,
llama3.1-405b, mixtral-8x7b on B200, GB200 NVL72, H200 and H100) priced from a row naming only its
benchmark, system and scenario: the mlperf-nvidia-5.0 preset and NVIDIA's v5.0 configs in
serving_systems.toml. Rows built here carry placeholder values (1000 tokens/s): only what a row is
priced with is checked, not how close; tests/data/mlperf_v5_0_nvidia.csv holds the published results."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import RowProblem, case_from_row, engine_runtime
from autotune.calibrate.serving_systems import _systems
from autotune.spec.presets import resolve_model

_VERSION = "MLPerf v5.0 NVIDIA TensorRT-LLM harness; TensorRT 10.8, CUDA 12.8"
_ROW = dict(id="v50", source="placeholder", hf_model_id="", arch="", params_b="", tp="", pp="", ep="", dp="",
            precision="", engine="mlperf-nvidia", engine_version=_VERSION, isl="", osl="",
            metric="output_tokens_per_s", value="1000", unit="tokens/s (system)", notes="placeholder value")
_LLAMA2, _LLAMA2_INTERACTIVE = "Llama-2-70B (MLPerf llama2-70b)", "Llama-2-70B (MLPerf llama2-70b-interactive)"
_LLAMA405, _MIXTRAL = "Llama-3.1-405B (MLPerf llama3.1-405b)", "Mixtral-8x7B (MLPerf mixtral-8x7b)"
_CHECK_ROWS = Path(__file__).parent / "data" / "mlperf_v5_0_nvidia.csv"


def _row(model: str, gpu: str, gpus: int, load: str) -> dict:
    notes = "OpenOrca/GSM8K/MBXP 15,000-sample set" if "Mixtral" in model else "placeholder value"
    return dict(_ROW, model=model, gpu=gpu, gpus=str(gpus), concurrency_or_batch=load, notes=notes)


def test_v50_rows_take_the_v50_preset_and_its_neighbours_keep_theirs():
    assert engine_runtime("mlperf-nvidia", _VERSION).name == "mlperf-nvidia-5.0"
    assert engine_runtime("mlperf-nvidia", "MLPerf v4.1 NVIDIA TensorRT-LLM harness").name == "mlperf-nvidia-4.1"
    assert engine_runtime("mlperf-nvidia", "MLPerf v5.1 NVIDIA TensorRT-LLM harness").name == "mlperf-nvidia-5.1"
    v50, v41 = engine_runtime("mlperf-nvidia", "5.0").serving, engine_runtime("mlperf-nvidia", "4.1").serving
    assert (v50.chunked_prefill, v50.kv_block_tokens, v50.rate_run_s) == (True, 32, 600)
    assert (v41.chunked_prefill, v41.kv_block_tokens) == (False, 64)
    assert (v50.kv_reservation, v50.memory_rule, v50.memory_fraction) == (v41.kv_reservation, v41.memory_rule, 0.9)


@pytest.mark.parametrize(("model", "gpu", "gpus", "load", "want"), [
    (_LLAMA2, "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=1, pp=1, replicas=8, dtype="nvfp4", seqs=2048, tokens=3584, chunked=True, run_s=2400)),
    (_LLAMA2, "B200-SXM-180GB", 1, "Server scenario, target_qps=45",
     dict(tp=1, pp=1, replicas=1, dtype="nvfp4", seqs=2048, tokens=3584, chunked=True, run_s=2400)),
    (_LLAMA2, "H100-SXM-80GB", 8, "Server scenario, target_qps=107",
     dict(tp=1, pp=2, replicas=4, dtype="fp8", seqs=1024, tokens=1024, chunked=True, run_s=3600)),
    (_LLAMA2_INTERACTIVE, "B200-SXM-180GB", 8, "Server scenario, target_qps=220",  # v5.0: the benchmark names it
     dict(tp=1, pp=1, replicas=8, dtype="nvfp4", seqs=768, tokens=768, chunked=True, run_s=1200)),
    (_LLAMA2_INTERACTIVE, "H200-SXM-141GB", 8, "Server scenario, target_qps=67.2",
     dict(tp=1, pp=1, replicas=8, dtype="fp8", seqs=512, tokens=256, chunked=True, run_s=1200)),
    (_LLAMA405, "B200-SXM-180GB", 8, "Server scenario, target_qps=1.3",
     dict(tp=2, pp=2, replicas=2, dtype="nvfp4", seqs=128, tokens=1024, chunked=True, run_s=600)),
    (_LLAMA405, "H200-SXM-141GB", 8, "Server scenario, target_qps=0.45",
     dict(tp=8, pp=1, replicas=1, dtype="fp8", seqs=64, tokens=2560, chunked=True, run_s=600)),
    (_LLAMA405, "GB200-186GB", 72, "Offline scenario",
     dict(tp=2, pp=2, replicas=18, dtype="nvfp4", seqs=128, tokens=1536, chunked=True, run_s=5400)),
    (_MIXTRAL, "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=1, pp=1, replicas=8, dtype="nvfp4", seqs=6144, tokens=14336, chunked=False, run_s=2400)),
    (_MIXTRAL, "H200-SXM-141GB", 8, "Server scenario, target_qps=428",
     dict(tp=1, pp=1, replicas=8, dtype="fp8", seqs=3072, tokens=8192, chunked=False, run_s=2400)),
])
def test_a_v50_row_naming_only_its_system_takes_the_published_config(model, gpu, gpus, load, want):
    case = case_from_row(_row(model, gpu, gpus, load))
    dep, engine = case.deployment, case.deployment.runtime.serving
    assert dep.runtime.name == "mlperf-nvidia-5.0" and dep.dtype == want["dtype"]
    assert (dep.tp, dep.pp, dep.replicas, dep.ep) == (want["tp"], want["pp"], want["replicas"], 1)
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (want["seqs"], want["tokens"])
    assert (engine.chunked_prefill, engine.rate_run_s, engine.kv_block_tokens) == (want["chunked"], want["run_s"], 32)
    assert any("closed/" in a and "configs/" in a for a in case.assumed)  # the config it took is named


def test_the_interactive_benchmark_and_the_plain_one_take_different_configs():
    plain = case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 8, "Server scenario, target_qps=364"))
    interactive = case_from_row(_row(_LLAMA2_INTERACTIVE, "B200-SXM-180GB", 8, "Server scenario, target_qps=220"))
    assert plain.deployment.runtime.serving.max_num_seqs == 2048
    assert interactive.deployment.runtime.serving.max_num_seqs == 768


def test_a_v50_system_without_a_published_config_falls_back_to_the_preset():
    """GB300 published no v5.0 llama2-70b config for any count: the row's GPUs form one instance, the preset's FP8
    default. B200 x4 published none either, but B200 x8's config sets its engine per TP 1 instance: four of them."""
    case = case_from_row(_row(_LLAMA2, "GB300-288GB", 4, "Offline scenario"))
    assert case.deployment.runtime.name == "mlperf-nvidia-5.0" and case.deployment.tp == 4
    assert any("mlperf-nvidia-5.0's default" in a for a in case.assumed)
    four = case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 4, "Offline scenario")).deployment
    assert (four.tp, four.replicas, four.weight_dtype) == (1, 4, "nvfp4")


# serving_systems.toml's keys -> the config field their sources quote
_CONFIG_KEYS = {"tp": r"tensor_parallelism", "pp": r"pipeline_parallelism", "precision": r"precision",
                "max_num_seqs": r"(?:gpu_batch_size|max_batch_size)", "max_num_batched_tokens": r"max_num_tokens",
                "memory_fraction": r"kvcache_free_gpu_mem_frac", "rate_run_s": r"min_duration",
                "chunked_prefill": r"enable_chunked_context", "nvfp4_gemm_fit": r"gemm_plugin",
                "effective_bits": r"effective_bits", "gemm_swiglu_fusion": r"gemm_swiglu_plugin"}


def _stated(key: str, source: str) -> str:
    if key == "chunked_prefill" and "use_paged_context_fmha = 'disable'" in source:  # the engine cannot chunk
        return "'disable'"
    found = re.search(_CONFIG_KEYS[key] + r" = (?:\{'[\w.-]+': )?([\w.']+)", source)
    assert found, (key, source)
    return found.group(1)


def test_every_v50_system_value_is_the_one_its_config_line_states():
    v50 = [s for s in _systems() if s.runtime == "mlperf-nvidia-5.0"]
    assert len(v50) == 20
    for system in v50:
        for key, source in system.sources:
            if key == "offline_expected_qps":  # the run's own LoadGen setting (tests/test_loadgen_offline.py)
                continue
            value, stated = system.get(key), _stated(key, source)
            if key == "rate_run_s":
                assert value * 1000 == int(stated), (system.config, key)
            elif key == "precision":
                assert {"nvfp4": "'fp4'", "fp8": "'fp8'"}[value] == stated, (system.config, key)
            elif key == "chunked_prefill" and stated == "'disable'":  # no paged context FMHA: no chunking
                assert value is False, system.config
            elif key == "memory_fraction":
                assert value == float(stated), (system.config, key)
            elif key == "nvfp4_gemm_fit":  # TensorRT-LLM's FP4 GEMM plugin: its measured NVFP4 Linear (MoE: dense only)
                assert stated == "'fp4'", (system.config, key)
                assert value == ("linear_dense" if resolve_model(system.model).is_moe else "linear"), system.config
            elif key == "gemm_swiglu_fusion":  # TensorRT-LLM's FP8 GEMM + SwiGLU plugin
                assert (value, stated) == (True, "'fp8'"), system.config
            else:
                assert str(value).lower() == stated.lower(), (system.config, key, value, stated)


def _check_rows() -> list[dict]:
    with _CHECK_ROWS.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_check_rows_name_v50_results_and_their_systems():
    rows = _check_rows()
    assert len(rows) == 42 and len({r["id"] for r in rows}) == 42
    for row in rows:
        assert "closed/NVIDIA/results/" in row["source"] and "mlperf_log_summary.txt" in row["source"]
        assert engine_runtime("mlperf-nvidia", row["engine_version"]).name == "mlperf-nvidia-5.0"
        assert case_from_row(row).deployment.runtime.name == "mlperf-nvidia-5.0"


@pytest.mark.slow
def test_every_v50_check_row_is_priced():
    """The published v5.0 results: each is priced (a prediction, no reason); how close is reported, not asserted."""
    checks = check_serving_rows(_check_rows())
    assert all(c.error_pct is not None and c.predicted > 0 for c in checks), [c.reason for c in checks if c.reason]


@pytest.mark.parametrize("gpu", ["NVIDIA B200", "B200", "B200 SXM 180GB"])
def test_a_system_is_found_however_its_gpu_is_spelled(gpu):
    """Rows from other sources spell the GPU their own way; the system is the same part (dgx-b200)."""
    dep = case_from_row(_row(_LLAMA2, gpu, 8, "Offline scenario")).deployment
    assert (dep.tp, dep.replicas, dep.dtype, dep.runtime.serving.max_num_seqs) == (1, 8, "nvfp4", 2048)


def test_another_board_of_the_same_chip_is_refused_not_matched():
    with pytest.raises(RowProblem, match="H100 NVL"):
        case_from_row(_row(_LLAMA2, "H100 NVL", 8, "Offline scenario"))


def test_one_gpu_and_eight_gpu_rows_of_one_config_are_priced_apart():
    """B200 x1 and x8 run the same per-GPU instance (the same simulated run); the x8 system's tokens/s is
    8 instances', the x1 row's one, even when both are checked in one call (a shared run must not carry
    the first row's replica count)."""
    rows = {r["id"]: r for r in _check_rows()}
    eight, one = check_serving_rows([rows["mlp50-001"], rows["mlp50-039"]])
    assert (eight.unit, one.unit) == ("tokens/s (8-GPU system)", "tokens/s (1 GPU)")
    assert eight.predicted == pytest.approx(8 * one.predicted, rel=1e-9)
