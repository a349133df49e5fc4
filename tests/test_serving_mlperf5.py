"""MLPerf Inference v5.x rows (kept back: llama3.1-405b, deepseek-r1, llama3.1-8b, llama2-70b on B200 and
GB200) priced from a row naming only its benchmark, system and scenario: the dataset means of
serving_datasets.toml, NVIDIA's v5.1 configs in serving_systems.toml, the mlperf-nvidia-5.1 preset.
The rows here are built in the test; their measured values are placeholders (1000 tokens/s), so only
that a row is priced and with what is checked, not how close."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import case_from_row, engine_runtime
from autotune.calibrate.serving_systems import _systems

_ROW = dict(id="v5", source="placeholder", hf_model_id="", arch="", params_b="", tp="", pp="", ep="", dp="",
            precision="", engine="mlperf-nvidia", engine_version="MLPerf v5.1 NVIDIA TensorRT-LLM harness", isl="",
            osl="", metric="output_tokens_per_s", value="1000", unit="tokens/s (system)", notes="placeholder value")


def _row(model: str, gpu: str, gpus: int, load: str) -> dict:
    return dict(_ROW, model=model, gpu=gpu, gpus=str(gpus), concurrency_or_batch=load)


def _datasets() -> dict:
    return tomllib.loads(resources.files("autotune.data").joinpath("serving_datasets.toml").read_text())


def test_v5_rows_resolve_to_the_v51_preset_and_v41_rows_keep_theirs():
    assert engine_runtime("mlperf-nvidia", "MLPerf v5.1 NVIDIA TensorRT-LLM harness").name == "mlperf-nvidia-5.1"
    assert engine_runtime("mlperf-nvidia", "MLPerf v4.1 NVIDIA TensorRT-LLM harness; TensorRT 10.2.0").name == \
        "mlperf-nvidia-4.1"
    preset = engine_runtime("mlperf-nvidia", "5.1").serving
    assert preset.chunked_prefill and preset.kv_block_tokens == 32 and preset.rate_run_s == 600
    assert not engine_runtime("mlperf-nvidia", "4.1").serving.chunked_prefill


@pytest.mark.parametrize(("model", "gpu", "gpus", "load", "want"), [
    ("Llama-3.1-405B (MLPerf llama3.1-405b)", "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=2, pp=2, replicas=2, ep=1, seqs=128, tokens=1536, isl=9429, osl=685, dataset="llama3-405b-mlperf")),
    ("Llama-3.1-405B (MLPerf llama3.1-405b)", "GB200-186GB", 72, "Interactive scenario, target_qps=10",
     dict(tp=4, pp=1, replicas=18, ep=1, seqs=2048, tokens=1024, isl=9429, osl=685, dataset="llama3-405b-mlperf")),
    ("DeepSeek-R1 (MLPerf deepseek-r1)", "B200-SXM-180GB", 8, "Server scenario, target_qps=5",
     dict(tp=8, pp=1, replicas=1, ep=8, seqs=512, tokens=3456, isl=804, osl=3856,  # outputs stop at the harness's 20,000
          dataset="deepseek-r1-mlperf (outputs <= 20000)")),
    ("Llama-3.1-8B (MLPerf llama3.1-8b)", "B200-SXM-180GB", 8, "Offline scenario",
     dict(tp=1, pp=1, replicas=8, ep=1, seqs=6000, tokens=12000, isl=871, osl=128, dataset=None)),
    ("Llama-2-70B (MLPerf llama2-70b-interactive)", "B200-SXM-180GB", 8, "Interactive scenario, target_qps=300",
     dict(tp=1, pp=1, replicas=8, ep=1, seqs=768, tokens=768, isl=222, osl=294, dataset="openorca-mlperf")),
])
def test_a_v5_row_naming_only_its_system_takes_the_published_config(model, gpu, gpus, load, want):
    case = case_from_row(_row(model, gpu, gpus, load))
    dep, engine = case.deployment, case.deployment.runtime.serving
    assert dep.runtime.name == "mlperf-nvidia-5.1" and dep.dtype == "nvfp4"
    assert (dep.tp, dep.pp, dep.replicas, dep.ep) == (want["tp"], want["pp"], want["replicas"], want["ep"])
    assert dep.attention_dp == (want["ep"] > 1)  # deepseek-r1's enable_attention_dp
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (want["seqs"], want["tokens"])
    assert (case.load.input_len, case.load.output_len) == (want["isl"], want["osl"])
    assert (case.load.lengths.name if case.load.lengths else None) == want["dataset"]
    assert any("configs/" in a for a in case.assumed)  # the config it took is named


def test_the_row_s_own_cells_still_win_over_its_system():
    row = dict(_row("Llama-3.1-405B (MLPerf llama3.1-405b)", "B200-SXM-180GB", 8, "Offline scenario"), tp="8",
               precision="fp8")
    dep = case_from_row(row).deployment
    assert (dep.tp, dep.pp, dep.replicas, dep.dtype) == (8, 1, 1, "fp8")


@pytest.mark.slow
def test_a_v5_row_of_each_benchmark_is_priced():
    """Placeholder measured values: the check is that each is priced (a prediction, no reason)."""
    rows = [dict(_row("Llama-3.1-405B (MLPerf llama3.1-405b)", "B200-SXM-180GB", 8, "Offline scenario"), id="a"),
            dict(_row("DeepSeek-R1 (MLPerf deepseek-r1)", "B200-SXM-180GB", 8, "Offline scenario"), id="b"),
            dict(_row("Llama-3.1-8B (MLPerf llama3.1-8b)", "GB200-186GB", 4, "Server scenario, target_qps=400"),
                 id="c"),
            dict(_row("Llama-2-70B (MLPerf llama2-70b)", "B200-SXM-180GB", 8, "Offline scenario"), id="d")]
    checks = check_serving_rows(rows)
    assert all(c.error_pct is not None and c.predicted > 0 for c in checks), [c.reason for c in checks]


def test_the_v5_dataset_means_are_their_sources_figures():
    """Each mean is the figure its source quotes (the summary CSV's mean, the README's tokens a sample,
    the harness's output cap, which every request reaches), and the sample counts mlperf.conf's min_query_count."""
    data = _datasets()
    for name, quoted in {"llama3-405b-mlperf": ("mean 9428.64", "'tokens_per_sample': 684.68"),
                         "deepseek-r1-mlperf": ("mean 803.79", "'mean-output-tok-len': 4043.449863263446"),
                         "llama3-8b-mlperf": ("mean 870.73", "max_output_len 128 with use_stop_tokens false")}.items():
        entry = data[name]
        assert quoted[0] in entry["mean_input_tokens"]["source"] and quoted[1] in entry["mean_output_tokens"]["source"]
        assert float(quoted[0].split()[1]) == entry["mean_input_tokens"]["value"]
    assert data["llama3-405b-mlperf"]["mean_output_tokens"]["value"] == 684.68
    assert data["deepseek-r1-mlperf"]["mean_output_tokens"]["value"] == pytest.approx(4043.449863263446, abs=0.005)
    assert data["llama3-8b-mlperf"]["mean_output_tokens"]["value"] == 128
    for name, samples in {"llama3-405b-mlperf": 8313, "deepseek-r1-mlperf": 4388, "llama3-8b-mlperf": 13368}.items():
        entry = data[name]["offline_samples"]
        assert entry["value"] == samples and f"min_query_count = {samples}" in entry["source"]


def test_every_v51_system_value_is_the_one_its_config_line_states():
    """A value and the config line quoted beside it agree (the attention-DP limits per rank, as published)."""
    v51 = [s for s in _systems() if s.runtime == "mlperf-nvidia-5.1"]
    assert len(v51) == 32  # B200 x8, GB200 x4 and x72; GB300 x72 (NVIDIA) and x8 (CoreWeave)
    for system in v51:
        for key, source in system.sources:
            if key in ("decode_graph_batch_sizes", "decode_cuda_graph_max_batch", "eager_prefill", "min_query_count"):
                continue  # lists and derived values: test_serving_mlperf51.py checks them against their config lines
            if key == "offline_expected_qps" or source.startswith("results/"):
                continue  # the run's own LoadGen settings, from its log: tests/test_loadgen_offline.py, test_serving_mlperf51.py
            value = system.get(key)
            if key == "overlap_admission":  # a default the config leaves in place, not a line it sets
                assert value is True and "disable_overlap_scheduler False" in source, system.config
                continue
            if key == "nvfp4_gemm_fit" and "trtllm_backend" in source:  # the PyTorch backend's own Linear (dslin47)
                assert value == "linear" and "DEFAULT_RUNTIME_FLAGS 'pytorch'" in source, system.config
                continue
            stated = re.search(r"= ([\w.']+)", source).group(1)
            if key == "rate_run_s":
                assert value * 1000 == int(stated), (system.config, key)
            elif key == "precision":
                assert (value, stated) == ("nvfp4", "'fp4'")
            elif key == "nvfp4_gemm_fit":  # gemm_plugin 'fp4': TensorRT-LLM's measured NVFP4 Linear
                assert (value, stated) == ("linear", "'fp4'"), system.config
            else:
                assert str(value).lower() == stated.lower(), (system.config, key, value, stated)
