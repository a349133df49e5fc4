"""MXFP4 weights in serving (GPT-OSS): experts only, 4.25 bits a weight, a different GEMM path per GPU."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from autotune.calibrate.serving_rows import RowProblem, case_from_row
from autotune.cost.serving_eval import ServingDeployment, expected_metric, replica_step_model, run_serving
from autotune.cost.serving_gemm_fits import gemm_rate_dtype
from autotune.errors import AutotuneError
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

OVERVIEW = Path(__file__).parent / "data" / "trtllm_1_0_perf_overview.csv"
_ROW = {"id": "mx-1", "source": "a test", "model": "gpt-oss-120b", "hf_model_id": "openai/gpt-oss-120b", "arch": "moe",
        "params_b": "", "gpu": "B200", "gpus": "1", "tp": "1", "pp": "1", "ep": "", "dp": "1", "precision": "mxfp4",
        "engine": "vllm", "engine_version": "0.10.2", "isl": "1024", "osl": "256",
        "concurrency_or_batch": "max load; num_requests=64", "metric": "output_tokens_per_s", "value": "1000",
        "unit": "tokens/s (whole TP group)", "notes": "offline"}


def _deployment(cluster: str, runtime: str, dtype: str, model: str = "gpt-oss-120b") -> ServingDeployment:
    return ServingDeployment(model=resolve_model(model), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                             tp=1, weight_dtype=dtype)


def test_an_mxfp4_row_prices_on_b200_and_h100():
    for gpu in ("B200", "H100-SXM-80GB"):
        case = case_from_row(dict(_ROW, gpu=gpu))
        assert case.deployment.dtype == "mxfp4"
        tokens_per_s = expected_metric((run_serving(case.deployment, case.load),), case.metric)
        assert 0 < tokens_per_s < 1e6


def test_mxfp4_experts_run_weight_only_on_hopper_and_at_the_engines_activations_on_blackwell():
    b200, h100 = load_cluster("dgx-b200").device, load_cluster("dgx-h100").device
    assert gemm_rate_dtype(h100, "mxfp4", "mxfp8") == "bf16"  # W4A16 below SM100, whatever the engine
    assert gemm_rate_dtype(b200, "mxfp4", "bf16") == "bf16"  # vLLM's default SM100 backend
    assert gemm_rate_dtype(b200, "mxfp4", "mxfp8") == "mxfp8"  # TensorRT-LLM's W4A8_MXFP4_MXFP8
    steps = {rt: replica_step_model(_deployment("dgx-b200", rt, "mxfp4"), max_tokens=8192, max_sampled=1)
             for rt in ("vllm-0.9", "tensorrt-llm-1.0")}
    # a one-token step reads the same weights, vLLM's MXFP4 x BF16 kernel at its measured stream (4.15 TB/s,
    # regressions.serving_moe_w4a16_stream_vllm: it converts the weights to BF16), TensorRT-LLM's MXFP8 one at the
    # memory fit; a large one is compute-bound, faster at the FP8 rate
    assert 1.02 * steps["tensorrt-llm-1.0"].linear_s[1] < steps["vllm-0.9"].linear_s[1] < 1.3 * steps["tensorrt-llm-1.0"].linear_s[1]
    assert steps["tensorrt-llm-1.0"].linear_s[8192] < 0.9 * steps["vllm-0.9"].linear_s[8192]
    hopper = {rt: replica_step_model(_deployment("dgx-h100", rt, "mxfp4"), max_tokens=8192, max_sampled=1)
              for rt in ("vllm-0.9", "tensorrt-llm-1.0")}
    # both W4A16 on Hopper; vLLM's Marlin kernel runs its experts padded to 3072 x 2944 (mxfp4_weight_only_pad),
    # and from a few thousand tokens at its measured large-batch rate (regressions.serving_moe_w4a16_vllm)
    padded = hopper["vllm-0.9"].linear_s[1:] - hopper["tensorrt-llm-1.0"].linear_s[1:]
    assert np.all(padded > 0)
    pad = (3072 * 2944) / (2880 * 2880)
    assert np.all(hopper["vllm-0.9"].linear_s[1:1025] < pad * hopper["tensorrt-llm-1.0"].linear_s[1:1025])
    assert hopper["vllm-0.9"].linear_s[8192] > 1.2 * pad * hopper["tensorrt-llm-1.0"].linear_s[8192]


def test_mxfp4_weights_take_4_25_bits_in_the_experts_and_bf16_elsewhere():
    model = resolve_model("gpt-oss-120b")
    tables = model_tables(model, 1, 2, "flash")
    _, moe = tables.layer_counts()
    expert_params = moe * float(tables.experts.params.sum())
    bf16 = replica_step_model(_deployment("dgx-h100", "tensorrt-llm-1.0", "bf16"), max_tokens=1, max_sampled=1)
    mxfp4 = replica_step_model(_deployment("dgx-h100", "tensorrt-llm-1.0", "mxfp4"), max_tokens=1, max_sampled=1)
    assert bf16.weight_bytes_per_gpu - mxfp4.weight_bytes_per_gpu == pytest.approx(expert_params * (2 - 4.25 / 8))
    # OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Table 1: checkpoint sizes 60.8 GiB and 12.8 GiB
    assert mxfp4.weight_bytes_per_gpu / 2**30 == pytest.approx(60.8, rel=0.01)
    small = replica_step_model(_deployment("dgx-h100", "tensorrt-llm-1.0", "mxfp4", model="gpt-oss-20b"), max_tokens=1,
                               max_sampled=1)
    assert small.weight_bytes_per_gpu / 2**30 == pytest.approx(12.8, rel=0.01)


def test_vllm_holds_marlins_padded_mxfp4_experts_on_hopper_only():
    held = {(cluster, rt): replica_step_model(_deployment(cluster, rt, "mxfp4"), max_tokens=1, max_sampled=1)
            .weight_bytes_per_gpu / 2**30 for cluster in ("dgx-h100", "dgx-b200") for rt in ("vllm-0.9", "tensorrt-llm-1.0")}
    # vLLM issue #23278 (0.10.1, one H100, Marlin): "Model loading took 65.9651 GiB"
    assert held[("dgx-h100", "vllm-0.9")] == pytest.approx(65.97, rel=0.01)
    assert held[("dgx-h100", "tensorrt-llm-1.0")] == pytest.approx(60.8, rel=0.01)
    assert held[("dgx-b200", "vllm-0.9")] == pytest.approx(held[("dgx-b200", "tensorrt-llm-1.0")])
    # TP 2: 1440 per partition is padded to 1536 (+6.7%) where TP 1's 2880 became 2944 (+2.2%)
    tp2 = {rt: replica_step_model(ServingDeployment(model=resolve_model("gpt-oss-120b"), cluster=load_cluster("dgx-h100"),
                                                    runtime=load_runtime(rt), tp=2, weight_dtype="mxfp4"),
                                  max_tokens=1, max_sampled=1).weight_bytes_per_gpu for rt in ("vllm-0.9", "tensorrt-llm-1.0")}
    assert tp2["vllm-0.9"] / tp2["tensorrt-llm-1.0"] > held[("dgx-h100", "vllm-0.9")] / held[("dgx-h100", "tensorrt-llm-1.0")]


def test_mxfp4_is_refused_where_it_does_not_exist():
    with pytest.raises(AutotuneError, match="precision"):  # a dense model has no experts to quantize
        replica_step_model(_deployment("dgx-h100", "vllm-0.9", "mxfp4", model="llama3-8b"), max_tokens=1, max_sampled=1)
    with pytest.raises(AutotuneError, match="precision"):  # an engine release that does not serve it
        _deployment("dgx-h100", "sglang-0.4", "mxfp4")
    with pytest.raises(RowProblem, match="precision"):
        case_from_row(dict(_ROW, engine="sglang", engine_version="0.3.6"))  # 0.4.5.post1+ serve NVFP4, which MXFP4 rows take


def test_every_row_of_the_trtllm_1_0_overview_is_read():
    with open(OVERVIEW, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 130
    for row in rows:
        case = case_from_row(row)
        assert case.deployment.runtime.name == "tensorrt-llm-1.0"
        assert case.deployment.dtype == ("nvfp4" if row["precision"] == "fp4" else "fp8")
        assert row["source"] and "00f37686" in row["source"]


@pytest.mark.slow
def test_the_trtllm_1_0_overview_is_fully_priced():
    from autotune.calibrate.serving_published import check_serving_csv

    checks = check_serving_csv(OVERVIEW)
    assert [c.row_id for c in checks if c.error_pct is None] == []


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gpt-oss-20b"])
def test_gpt_oss_checkpoints_quantize_the_experts_and_nothing_else(name):
    """The published config's quantization_config, applied to transformers' own GptOss modules: every
    weight it converts to MXFP4 belongs to the routed experts (what EXPERTS_ONLY_DTYPES prices)."""
    import fnmatch
    import json

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    published = json.loads((Path(__file__).parent / "data" / "hf_configs" / f"{name}.json").read_text())
    quant = published["quantization_config"]
    assert quant["quant_method"] == "mxfp4"
    small = {k: v for k, v in published.items() if not k.startswith("_") and k != "quantization_config"}
    small.update(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
    with torch.device("meta"):
        model = transformers.GptOssForCausalLM(transformers.GptOssConfig(**small))
    skipped = [p.rstrip(".*") for p in quant["modules_to_not_convert"]]
    converted = {n for n, p in model.named_parameters() if p.dim() >= 2
                 and not any(fnmatch.fnmatch(n, f"{s}*") for s in skipped)}
    assert converted and all(".mlp.experts." in n for n in converted)


def test_sglang_serves_gpt_oss_from_0_5_with_mxfp8_activations_on_blackwell():
    """SGLang 0.5 runs MXFP4 experts (layers/quantization/mxfp4.py): weight-only on Hopper, FlashInfer's MXFP4 x MXFP8
    on SM100 at flashinfer_mxfp4_moe_precision 'default'; its linears stay BF16 (not priced as an NVFP4 model)."""
    for version in ("0.5.0 (main)", "0.5.6"):
        for gpu in ("H100-SXM-80GB", "B200"):
            case = case_from_row(dict(_ROW, engine="sglang", engine_version=version, gpu=gpu))
            assert case.deployment.dtype == "mxfp4"
            assert case.deployment.runtime.serving.mxfp4_activation == "mxfp8"
    assert gemm_rate_dtype(load_cluster("dgx-b200").device, "mxfp4", "mxfp8") == "mxfp8"
    with pytest.raises(RowProblem, match="precision"):  # before 0.5 SGLang has no MXFP4 method, nor FP4 on Hopper
        case_from_row(dict(_ROW, engine="sglang", engine_version="0.4.9", gpu="H100-SXM-80GB"))
