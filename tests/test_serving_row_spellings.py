"""Serving rows as other sources spell them: model variants, engine, precision and GPU names, load
and metric phrasings read onto autotune's names, or refused with a one-line reason."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_names import RowProblem, engine_name, gpu_cluster, model_preset, name_precision, \
    precision_name, served_precision
from autotune.calibrate.serving_phrases import latency_unit_s, load_words, metric_name, per_user_rate, \
    throughput_scope
from autotune.calibrate.serving_published import check_serving_csv
from autotune.calibrate.serving_rows import case_from_row

DATA = Path(__file__).parent / "data"
SPELLINGS = DATA / "serving_row_spellings.csv"


@pytest.mark.parametrize("model, hf, preset", [
    ("Llama-4-Scout-17B-16E-Instruct", "", "llama4-scout-17b-16e"), ("Llama 4 Maverick", "", "llama4-maverick-17b-128e"),
    ("Llama-4-Maverick-17B-128E-Instruct-FP8", "", "llama4-maverick-17b-128e"),
    ("DeepSeek-R1-0528", "", "deepseek-v3"), ("DeepSeek-V3-0324", "", "deepseek-v3"), ("DeepSeek R1", "", "deepseek-v3"),
    ("", "nvidia/DeepSeek-R1-FP4", "deepseek-v3"), ("DeepSeek-R1-0528-NVFP4", "", "deepseek-v3"),
    ("DeepSeek-R1-Distill-Llama-70B", "", "llama3-70b"),
    ("Qwen3-30B-A3B-Instruct-2507", "", "qwen3-30b-a3b"), ("Qwen3-235B-A22B-Instruct-2507-FP8", "", "qwen3-235b-a22b"),
    ("gpt-oss-120b-MXFP4", "", "gpt-oss-120b"), ("openai/gpt-oss-20b", "", "gpt-oss-20b"),
    ("Meta-Llama-3.1-70B-Instruct", "", "llama3-70b"), ("Llama3.1-8B", "", "llama3-8b"),
    ("llama3_1-405b", "", "llama3-405b"), ("Llama-2-70B (MLPerf llama2-70b)", "", "llama2-70b"),
    ("llama2-70b-99.9", "", "llama2-70b"), ("llama2-70b-interactive-99", "", "llama2-70b"), ("dsr1", "", "deepseek-v3"), ("Mixtral-8x7B-Instruct-v0.1", "", "mixtral-8x7b"),
    ("Llama-3.1-8B-Instruct-quantized.w4a16", "", "llama3-8b"), ("Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "", "llama4-scout-17b-16e"),
])
def test_model_variants_name_their_preset(model, hf, preset):
    assert model_preset(model, hf) == preset


@pytest.mark.parametrize("model", ["Kimi-K2.5", "Phi-4", "gemma-3-27b-it", "Falcon-180B", "Mistral-Large-3-675B-Instruct-2512"])
def test_other_models_are_refused_naming_the_presets(model):
    with pytest.raises(RowProblem, match="no model preset.*models: "):
        model_preset(model)


@pytest.mark.parametrize("model, precision", [
    ("Llama-4-Maverick-17B-128E-Instruct-FP8", "fp8"), ("nvidia/DeepSeek-R1-FP4", "nvfp4"), ("Qwen3-30B-A3B-NVFP4", "nvfp4"),
    ("gpt-oss-120b-mxfp4", "mxfp4"), ("Llama-3.1-8B-Instruct-AWQ-INT4", "w4a16"), ("Llama-3.1-70B-Instruct", "")])
def test_a_checkpoint_name_states_its_precision(model, precision):
    assert name_precision(model) == precision


@pytest.mark.parametrize("cell, engine", [
    ("TensorRT-LLM", "tensorrt-llm"), ("trtllm", "tensorrt-llm"), ("TRT-LLM (PyTorch backend)", "tensorrt-llm"),
    ("trtllm-serve", "tensorrt-llm"), ("vLLM", "vllm"), ("vllm V1", "vllm"), ("SGLang", "sglang"),
    ("mlperf-nvidia", "mlperf-nvidia"), ("MLPerf NVIDIA harness (TensorRT-LLM)", "tensorrt-llm")])
def test_engine_spellings(cell, engine):
    assert engine_name(cell) == engine


@pytest.mark.parametrize("cell, says", [("ollama", "names none"), ("vLLM vs SGLang", "names 2")])
def test_engine_cells_naming_none_or_two_are_refused(cell, says):
    with pytest.raises(RowProblem, match=says):
        engine_name(cell)


@pytest.mark.parametrize("cell, precision", [
    ("bf16", "bf16"), ("BFloat16", "bf16"), ("FP8 (W8A8)", "fp8"), ("fp8_e4m3", "fp8"), ("FP8 block-wise", "fp8"),
    ("fp8 weights, fp8 kv cache", "fp8"), ("fp4", "nvfp4"), ("NVFP4", "nvfp4"), ("mxfp4", "mxfp4"), ("w4a16", "w4a16"),
    ("int4-awq", "w4a16"), ("GPTQ", "w4a16"), ("int8", "w8a8"), ("W4A8 AWQ", "w4a8"), ("", "")])
def test_precision_spellings(cell, precision):
    assert precision_name(cell) == precision


def test_an_unknown_precision_is_refused_listing_the_valid_ones():
    with pytest.raises(RowProblem, match="precision 'int3'.*bf16"):
        precision_name("int3")


def test_formats_an_engine_does_not_serve_are_substituted_only_where_they_cost_the_same():
    served, blackwell, hopper = ("bf16", "fp16", "fp8", "nvfp4"), {"bf16", "fp8", "nvfp4"}, {"bf16", "fp8"}
    assert served_precision("mxfp4", "vllm", served, blackwell)[0] == "nvfp4"
    assert served_precision("w8a8", "vllm", served, hopper)[0] == "fp8"
    assert served_precision("fp8", "vllm", served, hopper) == ("fp8", "")
    with pytest.raises(RowProblem, match="mxfp4 .*without FP4 tensor cores: vllm serves"):
        served_precision("mxfp4", "vllm", served, hopper)
    with pytest.raises(RowProblem, match="w4a16 .*BF16 GEMMs"):
        served_precision("w4a16", "vllm", served, blackwell)
    with pytest.raises(RowProblem, match="w8a8"):
        served_precision("w8a8", "vllm", served, {"bf16"})  # A100: INT8 tensor cores, no FP8


@pytest.mark.parametrize("cell, cluster", [
    ("H100-SXM-80GB", "dgx-h100"), ("NVIDIA H100 80GB HBM3", "dgx-h100"), ("HGX H100", "dgx-h100"),
    ("H200", "dgx-h200"), ("H200 SXM 141GB", "dgx-h200"), ("B200-SXM-180GB", "dgx-b200"), ("DGX B200", "dgx-b200"),
    ("GB200 NVL72", "gb200-nvl72"), ("GB200 NVL 72", "gb200-nvl72"), ("A100-80GB", "dgx-a100-80gb"),
    ("A100-SXM4-40GB", "dgx-a100-40gb"), ("GB300-288GB", "gb300-nvl72"), ("NVIDIA GB300 NVL72", "gb300-nvl72"),
    ("B300", "dgx-b300"), ("NVIDIA B300 SXM6 AC", "dgx-b300"), ("HGX B300", "dgx-b300")])
def test_gpus_with_a_profile_map_to_their_cluster(cell, cluster):
    assert gpu_cluster(cell) == cluster


@pytest.mark.parametrize("cell, says", [
    ("H20", "H20"), ("H100 NVL", "H100 NVL"), ("H100 PCIe", "PCIe"), ("GH200", "GH200"), ("GH200 144GB", "Grace"),
    ("L40S", "L40S"), ("L4", "L4"), ("MI300X", "AMD"), ("MI355X", "AMD"), ("H200 NVL", "H200 NVL"),
    ("DGX Station GB300", "252 GB"), ("B300 PCIe", "PCIe"), ("A100 PCIe 80GB", "PCIe"), ("H800", "H800"), ("RTX 4090", "no cluster preset")])
def test_other_gpus_stay_unpriced_saying_what_they_are(cell, says):
    with pytest.raises(RowProblem, match=says):
        gpu_cluster(cell)


@pytest.mark.parametrize("cell, notes, kind, number", [
    ("max", "", "max_throughput", 0), ("max throughput", "", "max_throughput", 0),
    ("Maximum throughput", "", "max_throughput", 0), ("request rate inf", "", "max_throughput", 0),
    ("64", "", "concurrency", 64), ("concurrency=64", "", "concurrency", 64), ("max_concurrency=64", "", "concurrency", 64),
    ("batch size 64", "", "concurrency", 64), ("bs=32", "", "concurrency", 32), ("64 concurrent requests", "", "concurrency", 64),
    ("c=16", "", "concurrency", 16), ("64 users", "", "concurrency", 64), ("conc 8", "", "concurrency", 8),
    ("request_rate=4", "", "rate", 4), ("4 req/s", "", "rate", 4), ("QPS=2", "", "rate", 2), ("8 RPS", "", "rate", 8),
    ("Server scenario, target_qps=75", "", "rate", 75), ("fixed", "--max-concurrency 32", "concurrency", 32)])
def test_load_phrasings(cell, notes, kind, number):
    words = load_words(cell, notes)
    assert words.kind == kind
    assert {"max_throughput": 0, "concurrency": words.concurrency, "rate": words.rate_per_s}[kind] == number


def test_a_measured_request_rate_in_the_notes_is_not_the_load_of_a_closed_loop():
    # trtllm-bench --concurrency 7168 printing its result, "21.0675 req/s": a closed loop, not Poisson arrivals
    words = load_words("concurrency=7168; num_requests=114688", "43146.2042 tokens/s at 21.0675 req/s")
    assert (words.kind, words.concurrency, words.count) == ("concurrency", 7168, 114688)
    # a rate the load cell states is still the load, and a rate in the notes of a cell naming no concurrency
    assert load_words("request rate 4, max concurrency 64", "").kind == "rate"
    assert load_words("fixed", "request_rate=4").rate_per_s == 4


def test_engine_limits_in_the_notes_are_not_read_as_load():
    with pytest.raises(RowProblem, match="cannot read how load was applied"):
        load_words("whatever", "max_batch_size 256; max_num_tokens 8192")


@pytest.mark.parametrize("cell, metric", [
    ("ttft_mean", "ttft_mean"), ("mean_ttft_ms", "ttft_mean"), ("Median TPOT", "tpot_median"), ("p99_itl_ms", "itl_p99"),
    ("median_e2el_ms", "e2e_median"), ("output_throughput", "output_tokens_per_s"),
    ("total_token_throughput", "total_tokens_per_s"), ("request_throughput", "requests_per_s"),
    ("output_tokens_per_s", "output_tokens_per_s"), ("Time to first token (mean)", "ttft_mean"),
    ("inter_token_latency_p99", "itl_p99"), ("request_latency_median", "e2e_median")])
def test_metric_spellings(cell, metric):
    assert metric_name(cell) == metric


@pytest.mark.parametrize("unit, metric", [("tokens/s", "output_tokens_per_s"), ("total tokens/s", "total_tokens_per_s"),
                                          ("req/s", "requests_per_s")])
def test_a_bare_throughput_is_read_by_its_unit(unit, metric):
    assert metric_name("Throughput", unit) == metric


@pytest.mark.parametrize("metric, unit, tpot", [
    ("TPS/user", "tokens/s/user", "tpot_mean"), ("output_tokens_per_s_per_user", "tokens/s", "tpot_mean"),
    ("interactivity (median)", "tok/s/user", "tpot_median"), ("output_tokens_per_s", "tokens/s (1 GPU)", "")])
def test_a_per_user_token_rate_is_one_over_tpot(metric, unit, tpot):
    assert per_user_rate(metric, unit) == tpot


def test_a_metric_without_its_statistic_is_refused():
    with pytest.raises(RowProblem, match="mean, median or p99"):
        metric_name("TTFT")


def test_units():
    assert latency_unit_s("milliseconds") == 1e-3 and latency_unit_s("ms/token") == 1e-3 and latency_unit_s("s") == 1.0
    assert throughput_scope("tokens/s/gpu")[0] == "gpu" and throughput_scope("tokens/s (whole TP group)")[0] == "replica"
    assert throughput_scope("tokens/s (8-GPU system)") == ("system", "")
    scope, read_as = throughput_scope("tok/s")
    assert scope == "system" and "names no scope" in read_as
    with pytest.raises(RowProblem, match="per user"):
        throughput_scope("tokens/s/user")


def _spelled() -> list[dict]:
    with open(SPELLINGS, newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_spelled_rows_are_read_as_what_they_name():
    rows = {r["id"]: r for r in _spelled()}
    r1 = case_from_row(rows["spell-004"])  # DeepSeek-R1-0528 fp4 on 8 B200, SGLang DP attention, per GPU
    assert (r1.deployment.model.name, r1.deployment.cluster.name, r1.deployment.dtype) == ("deepseek-v3", "dgx-b200", "nvfp4")
    assert (r1.deployment.tp, r1.deployment.ep, r1.deployment.attention_dp, r1.scope) == (8, 8, True, "gpu")
    vllm_dp = case_from_row(rows["spell-014"])  # vllm serve -dp 8 --enable-expert-parallel: one replica of 8
    assert (vllm_dp.deployment.tp, vllm_dp.deployment.replicas, vllm_dp.deployment.attention_dp) == (8, 1, True)
    r1_native = case_from_row(rows["spell-006"])  # no precision cell: DeepSeek's checkpoint is FP8
    assert r1_native.deployment.dtype == "fp8" and any("released checkpoint" in a for a in r1_native.assumed)
    gpt = case_from_row(rows["spell-009"])  # MXFP4 on B200 under vLLM, which serves it
    assert gpt.deployment.dtype == "mxfp4" and not any("priced as" in a for a in gpt.assumed)
    sglang = case_from_row(dict(rows["spell-009"], engine="SGLang"))  # SGLang 0.5 serves MXFP4 experts too
    assert sglang.deployment.dtype == "mxfp4" and not any("priced as" in a for a in sglang.assumed)
    old = case_from_row(dict(rows["spell-009"], engine="SGLang", engine_version="0.4.9"))  # before: NVFP4, said so
    assert old.deployment.dtype == "nvfp4" and any("mxfp4 priced as nvfp4" in a for a in old.assumed)
    assert case_from_row(rows["spell-003"]).deployment.runtime.serving.engine == "tensorrt-llm"  # 'TRT-LLM'
    per_user = case_from_row(rows["spell-021"])  # tokens/s/user: 1 / mean TPOT
    assert (per_user.metric, per_user.inverse, per_user.scope) == ("tpot_mean", True, "replica")
    assert all("PLACEHOLDER" in r["notes"] for r in rows.values())


def test_a_gpu_count_may_come_from_the_gpu_cell_or_the_degrees():
    row = {r["id"]: r for r in _spelled()}["spell-013"]  # 2 H200, tp 2
    assert case_from_row(dict(row, gpus="", gpu="2x H200 SXM")).deployment.gpus == 2
    assert case_from_row(dict(row, gpus="", dp="2")).deployment.replicas == 2  # tp 2 x dp 2
    only_gpus = case_from_row(dict(row, tp="", pp="", dp=""))  # no degree: one instance over the GPUs, said
    assert (only_gpus.deployment.tp, only_gpus.deployment.replicas) == (2, 1)
    assert any(a.startswith("tp 2 (no degree stated") for a in only_gpus.assumed)
    with pytest.raises(RowProblem, match="no tensor-parallel degree"):
        case_from_row(dict(row, tp="", pp="", dp="3"))


def test_gpt_oss_mxfp4_on_hopper_says_why_it_is_not_priced_by_an_engine_without_it():
    row = dict({r["id"]: r for r in _spelled()}["spell-009"], gpu="H100-SXM-80GB")
    assert case_from_row(row).deployment.dtype == "mxfp4"  # vLLM: 4-bit weights into BF16 GEMMs on Hopper
    assert case_from_row(dict(row, engine="SGLang")).deployment.dtype == "mxfp4"  # SGLang 0.5 likewise
    # the sglang-0.5.0 preset (the 0.5.0rc0 wheel's mxfp4.py) and sglang-0.5.3, based on it
    for version, preset in (("0.5.0rc0", "sglang-0.5.0"), ("0.5.5", "sglang-0.5.3")):
        dep = case_from_row(dict(row, engine="SGLang", engine_version=version)).deployment
        assert (dep.dtype, dep.runtime.name) == ("mxfp4", preset)
    with pytest.raises(RowProblem, match="mxfp4.*without FP4 tensor cores: sglang-0.4.8 serves"):  # no mxfp4.py in 0.4.10
        case_from_row(dict(row, engine="SGLang", engine_version="0.4.10"))


@pytest.mark.slow
def test_every_spelled_row_is_priced():
    """Each row of tests/data/serving_row_spellings.csv is simulated (its value is a placeholder, so
    only that a prediction is made is checked, not its error)."""
    checks = check_serving_csv(SPELLINGS)
    assert [c.reason for c in checks if c.predicted is None] == []
    assert all(c.predicted > 0 for c in checks)
    per_user = next(c for c in checks if c.row_id == "spell-021")
    assert 5.0 < per_user.predicted < 1000.0  # a decode rate in tokens/s, not a TPOT in seconds
    assert {c.engine for c in checks} == {"tensorrt-llm", "vllm", "sglang"}  # summaries group the engine's name
