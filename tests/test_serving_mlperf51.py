"""MLPerf Inference v5.1 rows (NVIDIA's September 2025 closed results: llama2-70b, llama3.1-405b,
llama3.1-8b and deepseek-r1 on B200 x8, GB200 NVL72 x4 and x72) priced from a row naming only its
benchmark, system and scenario: the mlperf-nvidia-5.1 preset and NVIDIA's v5.1 configs in
serving_systems.toml. Rows built here carry placeholder values: only what a row is priced with is
checked, not how close; tests/data/mlperf_v5_1_nvidia.csv holds the published results."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row, engine_runtime
from autotune.calibrate.serving_systems import PublishedSystem, _systems
from autotune.cost import serving_eval
from autotune.cost.graph_padding import graph_sizes, padded_batch
from autotune.errors import AutotuneError
from autotune.cost.serving_load import metric_value
from autotune.cost.serving_run import Trace

_VERSION = "MLPerf v5.1 NVIDIA TensorRT-LLM harness; TensorRT-LLM 18c0333e, TensorRT 10.11, CUDA 12.9"
_ROW = dict(id="v51", source="placeholder", hf_model_id="", arch="", params_b="", tp="", pp="", ep="", dp="",
            precision="", engine="mlperf-nvidia", engine_version=_VERSION, isl="", osl="",
            metric="output_tokens_per_s", value="1000", unit="tokens/s (system)")
_LLAMA2, _LLAMA405 = "Llama-2-70B (MLPerf llama2-70b)", "Llama-3.1-405B (MLPerf llama3.1-405b)"
_LLAMA8, _R1 = "Llama-3.1-8B (MLPerf llama3.1-8b)", "DeepSeek-R1 (MLPerf deepseek-r1)"
_DATASETS = {_LLAMA2: "OpenOrca 24,576-sample set", _LLAMA405: "MLPerf llama3.1-405b 8,313-sample set",
             _LLAMA8: "MLPerf llama3.1-8b 13,368-sample set", _R1: "MLPerf deepseek-r1 4,388-sample set"}
_INTERACTIVE = "Interactive scenario (LoadGen Server mode under the interactive limits), Poisson arrivals target_qps="
_CHECK_ROWS = Path(__file__).parent / "data" / "mlperf_v5_1_nvidia.csv"


def _row(model: str, gpu: str, gpus: int, load: str, **cells) -> dict:
    return dict(_ROW, model=model, gpu=gpu, gpus=str(gpus), concurrency_or_batch=load, notes=_DATASETS[model]) | cells


@pytest.mark.parametrize(("model", "gpu", "gpus", "load", "want"), [
    (_LLAMA2, "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=1, pp=1, ep=1, replicas=8, dp=False, seqs=2048, tokens=3584, chunked=True, run_s=2400)),
    (_LLAMA2, "B200-SXM-180GB", 8, _INTERACTIVE + "220",
     dict(tp=1, pp=1, ep=1, replicas=8, dp=False, seqs=768, tokens=768, chunked=True, run_s=1200)),
    (_LLAMA2, "GB200-186GB", 4, "Server scenario, target_qps=182",
     dict(tp=1, pp=1, ep=1, replicas=4, dp=False, seqs=2048, tokens=3584, chunked=True, run_s=600)),
    (_LLAMA405, "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=2, pp=2, ep=1, replicas=2, dp=False, seqs=128, tokens=1536, chunked=True, run_s=600)),
    (_LLAMA405, "B200-SXM-180GB", 8, "Server scenario, target_qps=1.9",
     dict(tp=4, pp=1, ep=1, replicas=2, dp=False, seqs=256, tokens=2048, chunked=True, run_s=600)),
    (_LLAMA405, "GB200-186GB", 72, _INTERACTIVE + "15.2",
     dict(tp=4, pp=1, ep=1, replicas=18, dp=False, seqs=2048, tokens=1024, chunked=True, run_s=900)),
    (_LLAMA8, "B200-SXM-180GB", 8, "Server scenario, target_qps=1000",
     dict(tp=1, pp=1, ep=1, replicas=8, dp=False, seqs=6000, tokens=12000, chunked=True, run_s=600)),
    (_R1, "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=8, pp=1, ep=8, replicas=1, dp=True, seqs=512, tokens=4608, chunked=False, run_s=600)),
    (_R1, "GB200-186GB", 72, "Server scenario, target_qps=45",
     dict(tp=8, pp=1, ep=8, replicas=9, dp=True, seqs=512, tokens=3456, chunked=False, run_s=600)),
])
def test_a_v51_row_naming_only_its_system_takes_the_published_config(model, gpu, gpus, load, want):
    case = case_from_row(_row(model, gpu, gpus, load))
    dep, engine = case.deployment, case.deployment.runtime.serving
    assert dep.runtime.name == "mlperf-nvidia-5.1" and dep.dtype == "nvfp4"
    assert (dep.tp, dep.pp, dep.ep, dep.replicas, dep.attention_dp) == (
        want["tp"], want["pp"], want["ep"], want["replicas"], want["dp"])
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (want["seqs"], want["tokens"])
    assert (engine.chunked_prefill, engine.rate_run_s) == (want["chunked"], want["run_s"])
    assert any("configs/" in a for a in case.assumed)  # the config it took is named


def test_deepseek_r1_outputs_stop_at_the_harness_limit():
    """The dataset's reference outputs reach 32,768 tokens; NVIDIA's generation_config.json stops them at 20,000."""
    case = case_from_row(_row(_R1, "B200-SXM-180GB", 8, "Offline scenario"))
    assert max(case.load.lengths.output_tokens) == 20000 and case.load.output_len < 4043
    _, outputs = case.load.lengths.draw(20000, seed=0)
    assert outputs.max() == 20000 and abs(outputs.mean() - case.load.output_len) < 0.03 * case.load.output_len
    assert any("max_output_len 20000" in a for a in case.assumed)
    llama = case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 8, "Offline scenario"))  # no limit published: as drawn
    assert llama.load.lengths.name == "openorca-mlperf"


def test_gb200_x4_llama2_interactive_takes_b200_x8_interactives_settings_named_as_unpublished():
    """NVIDIA published GB200 x4 llama2-70b Interactive results but no configs/.../Interactive/llama2-70b.py
    (@965182b03376); its other llama2-70b and llama3_1-8b configs are B200 x8's per GPU, so the row runs
    B200 x8 Interactive's engine on each GPU (4 TP 1 instances, not one TP 4 instance) and says so."""
    case = case_from_row(_row(_LLAMA2, "GB200-186GB", 4, _INTERACTIVE + "110"))
    dep, b200 = case.deployment, case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 8, _INTERACTIVE + "220")).deployment
    assert (dep.tp, dep.replicas, b200.tp, b200.replicas) == (1, 4, 1, 8)
    assert dep.runtime.serving == b200.runtime.serving
    tp_note = next(a for a in case.assumed if a.startswith("tp "))
    assert "config not published" in tp_note and "configs/B200-SXM-180GBx8/Interactive/llama2-70b.py" in tp_note


def test_an_mlperf_server_row_reads_tokens_per_s_up_to_the_final_issued_query():
    server = case_from_row(_row(_LLAMA8, "B200-SXM-180GB", 8, "Server scenario, target_qps=1000"))
    offline = case_from_row(_row(_LLAMA8, "B200-SXM-180GB", 8, "Offline scenario"))
    other = case_from_row(dict(_row(_LLAMA8, "B200-SXM-180GB", 1, "request rate 4", isl="1000", osl="100"),
                               engine="vllm", engine_version="0.10.0"))
    assert server.metric == "loadgen_completed_tokens_per_s"
    assert offline.metric == "output_tokens_per_s" and other.metric == "output_tokens_per_s"


def test_loadgen_window_ends_at_the_last_issued_query_not_the_last_to_finish():
    """Two requests: the first (issued at 0 s) finishes at 100 s, the last issued (at 10 s) at 20 s:
    LoadGen's Server counts all 300 tokens over 20 s; a run-length reading, over 100 s."""
    trace = Trace(arrival_s=np.array([0.0, 10.0]), first_token_s=np.array([1.0, 11.0]),
                  finish_s=np.array([100.0, 20.0]), output_len=np.array([200, 100]), input_len=np.array([10, 10]),
                  itl_s=np.array([0.1]), itl_weight=np.array([1.0]), steps=1, mean_running=1.0)
    assert metric_value(trace, "loadgen_completed_tokens_per_s") == pytest.approx(300 / 20)
    assert metric_value(trace, "output_tokens_per_s") == pytest.approx(300 / 100)


# serving_systems.toml's keys -> the config field their sources quote
_CONFIG_KEYS = {"tp": r"tensor_parallelism", "pp": r"pipeline_parallelism", "ep": r"moe_expert_parallelism",
                "attention_dp": r"enable_attention_dp", "precision": r"precision",
                "max_num_seqs": r"gpu_batch_size", "max_num_batched_tokens": r"max_num_tokens",
                "memory_fraction": r"kvcache_free_gpu_mem_frac", "rate_run_s": r"min_duration",
                "chunked_prefill": r"enable_chunked_context", "max_output_len": r"max_output_len",
                "adp_batching_wait_iters": r"adp_balancing_batching_wait_iters",
                "adp_timeout_iters": r"adp_balancing_timeout_iters", "nvfp4_gemm_fit": r"gemm_plugin"}


def _graph_source_agrees(system: PublishedSystem, key: str, source: str) -> bool:
    """A PyTorch-backend (deepseek-r1) setting: the graph list as its config lists it, the eager threshold at the
    8 attention-DP ranks x its largest size, eager prompt steps from the harness's default backend."""
    sizes = system.get("decode_graph_batch_sizes")
    if key == "decode_graph_batch_sizes":
        return f"cuda_graph_batch_sizes [{', '.join(map(str, sizes))}] with cuda_graph_padding_enabled True" in source
    if key == "decode_cuda_graph_max_batch":
        return system.get(key) == 8 * sizes[-1] and f"({sizes[-1]})" in source
    return system.get(key) is True and "trtllm_backend" in source and "'pytorch'" in source


def test_every_v51_system_value_is_the_one_its_config_line_states():
    v51 = [s for s in _systems() if s.runtime == "mlperf-nvidia-5.1"]
    assert len(v51) == 32  # B200 x8, GB200 x4 and x72; GB300 x72 (NVIDIA) and x8 (CoreWeave)
    for system in v51:
        for key, source in system.sources:
            if key in ("decode_graph_batch_sizes", "decode_cuda_graph_max_batch", "eager_prefill"):
                assert _graph_source_agrees(system, key, source), (system.config, key, source)
                continue
            if key == "overlap_admission":  # the harness's default extra config, as the executor loop runs it
                assert system.get(key) is True and "disable_overlap_scheduler False" in source, system.config
                assert "_executor_loop_overlap" in source and "deepseek-r1.py" in source, system.config
                continue
            if key == "offline_expected_qps":  # the run's own LoadGen setting (tests/test_loadgen_offline.py)
                continue
            if key == "nvfp4_gemm_fit" and "trtllm_backend" in source:  # the PyTorch backend's own Linear
                assert system.get(key) == "linear" and "'pytorch'" in source and "NVFP4LinearMethod" in source, system.config
                assert "deepseek-r1.py" in source, system.config
                continue
            if key == "rate_run_s" and source.startswith("results/"):  # the run's own min_duration, not its config's
                assert f"min_duration (ms): {int(system.get(key) * 1000)}" in source, system.config
                continue
            if key == "min_query_count":  # a product as the config writes it: 26328 * 8
                stated = re.search(r"min_query_count = ([\d *]+?) \(", source).group(1)
                assert system.get(key) == np.prod([int(x) for x in stated.split("*")]), (system.config, stated)
                continue
            found = re.search(_CONFIG_KEYS[key] + r" = ([\w.']+)", source)
            assert found and re.match(r"(closed/\w+/)?configs/", source), (system.config, key, source)
            value, stated = system.get(key), found.group(1)
            if key == "rate_run_s":
                assert value * 1000 == int(stated), (system.config, key)
            elif key == "precision":
                assert (value, stated) == ("nvfp4", "'fp4'"), (system.config, key)
            elif key == "memory_fraction":
                assert value == float(stated), (system.config, key)
            elif key == "nvfp4_gemm_fit":  # TensorRT-LLM's FP4 GEMM plugin: its measured NVFP4 Linear
                assert (value, stated) == ("linear", "'fp4'"), (system.config, key)
            else:
                assert str(value).lower() == stated.lower(), (system.config, key, value, stated)


def _check_rows() -> list[dict]:
    with _CHECK_ROWS.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_check_rows_name_v51_results_and_their_systems():
    rows = _check_rows()
    assert len(rows) == 43 and len({r["id"] for r in rows}) == 43
    for row in rows:
        assert "closed/NVIDIA/results/" in row["source"] and "mlperf_log_summary.txt" in row["source"]
        assert engine_runtime("mlperf-nvidia", row["engine_version"]).name == "mlperf-nvidia-5.1"
        assert case_from_row(row).deployment.runtime.name == "mlperf-nvidia-5.1"


@pytest.mark.slow
def test_the_deepseek_r1_check_rows_are_priced():
    """The published deepseek-r1 results (attention DP with expert parallelism on B200 x8 and GB200 x72) are
    priced (a prediction, no reason); how close is reported, not asserted. Every row reads as a case above;
    pricing all 43 takes 3-5 minutes on two cores (`autotune check-published tests/data/mlperf_v5_1_nvidia.csv`),
    too long for the test run."""
    rows = [r for r in _check_rows() if r["model"] == _R1]
    checks = check_serving_rows(rows)
    assert len(checks) == len(rows) == 8
    assert all(c.error_pct is not None and c.predicted > 0 for c in checks), [c.reason for c in checks if c.reason]


def test_an_engine_built_with_the_fp4_gemm_plugin_prices_tensorrt_llms_measured_linear():
    # B200 Llama 2 70B: the Interactive engine sets gemm_plugin 'fp4', the Offline engine none
    interactive = case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 8, _INTERACTIVE + "220")).deployment
    offline = case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 8, "Offline scenario")).deployment
    assert interactive.runtime.serving.nvfp4_gemm_fit == "linear"
    assert offline.runtime.serving.nvfp4_gemm_fit == "best_measured"
    plugin = serving_eval.replica_step_model(interactive, max_tokens=64, max_sampled=64)
    native = serving_eval.replica_step_model(offline, max_tokens=64, max_sampled=64)
    # TensorRT-LLM's CUTLASS FP4 linear is slower than B200's fastest measured one (SGLang 0.5.9's) at any batch
    assert plugin.linear_s[1] > native.linear_s[1] and plugin.linear_s[64] > native.linear_s[64]


def test_deepseek_r1_on_the_pytorch_backend_prices_tensorrt_llms_measured_linear():
    """DeepSeek-R1 runs trtllm-serve's PyTorch backend (no TensorRT engine): its NVFP4 shared experts and dense
    MLPs take TensorRT-LLM's measured Linear (serving_gemm), slower on B200 than the fastest measured linear
    (SGLang 0.5.9's) that best_measured gives the TensorRT engines; the routed experts stay on the MoE table."""
    for gpu, gpus, load in (("B200-SXM-180GB", 8, "Offline scenario"), ("GB200-186GB", 72, "Server scenario, target_qps=45")):
        deployment = case_from_row(_row(_R1, gpu, gpus, load)).deployment
        assert deployment.runtime.serving.nvfp4_gemm_fit == "linear", gpu
        assert deployment.runtime.serving.moe_layer_table == "trtllm", gpu
    offline = case_from_row(_row(_R1, "B200-SXM-180GB", 8, "Offline scenario")).deployment
    native = replace(offline, runtime=offline.runtime.with_changes(
        serving=offline.runtime.serving.with_changes(nvfp4_gemm_fit="best_measured")))
    pytorch_step = serving_eval.replica_step_model(offline, max_tokens=512, max_sampled=512)
    native_step = serving_eval.replica_step_model(native, max_tokens=512, max_sampled=512)
    assert pytorch_step.rank_linear_s[512] > native_step.rank_linear_s[512]


def test_a_system_setting_names_an_nvfp4_fit_the_engine_knows():
    with pytest.raises(AutotuneError):
        PublishedSystem(runtime="mlperf-nvidia-5.1", model="llama2-70b", gpu="B200-SXM-180GB", gpus=8,
                        scenario="offline", config="x", values=(("nvfp4_gemm_fit", "cutlass"),),
                        sources=(("nvfp4_gemm_fit", "y"),))


def test_deepseek_r1_engines_replay_their_configs_cuda_graphs_padded_and_run_prompts_eagerly():
    # the harness serves deepseek-r1 on TensorRT-LLM's PyTorch backend (llmlib's default trtllm_backend)
    server = case_from_row(_row(_R1, "B200-SXM-180GB", 8, "Server scenario, target_qps=5")).deployment.runtime.serving
    assert server.decode_graph_batch_sizes == (128, 256, 384, 512) and server.decode_cuda_graph_max_batch == 4096
    assert server.eager_prefill
    # the measured Server run's 1,236 decodes (about 155 a rank) replay the 256 graph on every rank
    assert padded_batch(1236, graph_sizes(server.decode_graph_batch_sizes, 512), 8) == 2048
    gb300 = case_from_row(_row(_R1, "GB300-288GB", 72, "Offline scenario")).deployment.runtime.serving
    assert gb300.decode_graph_batch_sizes[-1] == 1280 and gb300.decode_cuda_graph_max_batch == 8 * 1280
    # the TensorRT-engine benchmarks keep the preset's: no graph padding, compiled prompt steps
    llama = case_from_row(_row(_LLAMA2, "B200-SXM-180GB", 8, "Offline scenario")).deployment.runtime.serving
    assert llama.decode_graph_batch_sizes == () and not llama.eager_prefill


def test_a_system_graph_list_must_rise():
    with pytest.raises(AutotuneError):
        PublishedSystem(runtime="mlperf-nvidia-5.1", model="deepseek-v3", gpu="B200-SXM-180GB", gpus=8,
                        scenario="server", config="x", values=(("decode_graph_batch_sizes", (256, 128)),),
                        sources=(("decode_graph_batch_sizes", "y"),))


def test_a_deepseek_r1_server_run_issues_its_configs_min_query_count():
    # LoadGen issues max(min_query_count, target_qps x min_duration): 26,328 queries at 5 QPS run 5,248 s on B200,
    # not the 600 s min_duration's 3,000; the simulation keeps MAX_RATE_REQUESTS of them (the steady state)
    b200 = case_from_row(_row(_R1, "B200-SXM-180GB", 8, "Server scenario, Poisson arrivals target_qps=5"))
    assert b200.load.num_requests == 10000 and any("of the run's 26328 requests" in a for a in b200.assumed)
    # without a published count the run is target_qps x min_duration (Llama 2 70B's GB200 x4 Server: 600 s)
    llama = case_from_row(_row(_LLAMA2, "GB200-186GB", 4, "Server scenario, target_qps=4")).load
    assert llama.num_requests == round(4 * 600 / 4)
