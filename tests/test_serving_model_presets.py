"""The serving-benchmark presets of issue 31 (dense Qwen3 and Qwen2.5, Mistral 7B and Large 2,
Qwen3-Coder-480B, Kimi K2): each is what autotune's config reader builds from the stored config.json,
with the parameter count transformers builds from that file (slow); the names serving rows give
them resolve, and models the graph cannot express are refused saying why, on one line."""

from __future__ import annotations

import json

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_names import NATIVE_PRECISIONS, RowProblem, model_preset, name_precision
from autotune.calibrate.serving_rows import case_from_row
from autotune.spec.hf_config import model_from_hf_dict
from autotune.spec.presets import load_preset

PRESETS = {"qwen3-8b": "qwen3-8b", "qwen3-14b": "qwen3-14b", "qwen3-32b": "qwen3-32b",
           "qwen2.5-7b": "qwen2.5-7b-instruct", "qwen2.5-14b": "qwen2.5-14b-instruct",
           "qwen2.5-32b": "qwen2.5-32b-instruct", "qwen2.5-72b": "qwen2.5-72b-instruct",
           "mistral-7b": "mistral-7b-instruct-v0.3", "mistral-large-2": "mistral-large-instruct-2407",
           "qwen3-coder-480b-a35b": "qwen3-coder-480b-a35b-instruct", "kimi-k2": "kimi-k2-instruct",
           "glm-4.5": "glm-4.5", "glm-4.5-air": "glm-4.5-air", "minimax-m2": "minimax-m2"}


def _config(data_dir, file: str) -> dict:
    """The stored config.json, as published (Kimi K2's model_type kimi_k2 included)."""
    return json.loads((data_dir / "hf_configs" / f"{file}.json").read_text())


@pytest.mark.parametrize("name, file", PRESETS.items())
def test_presets_are_what_the_config_reader_builds(data_dir, name, file):
    preset, read = load_preset(name), model_from_hf_dict(_config(data_dir, file))
    assert preset.with_changes(name="x", source="") == read.with_changes(name="x", source="")


def test_the_shapes_that_set_their_cost():
    qwen3, qwen25, coder, kimi = (load_preset(n) for n in ("qwen3-32b", "qwen2.5-72b", "qwen3-coder-480b-a35b", "kimi-k2"))
    assert (qwen3.head_dim, qwen3.num_heads * qwen3.head_dim, qwen3.qk_norm, qwen3.qkv_bias) == (128, 8192, "head", False)
    assert (qwen25.qkv_bias, qwen25.attn_out_bias, qwen25.qk_norm, qwen25.sliding_window) == (True, False, "none", 0)
    assert (coder.num_moe_layers, coder.num_experts, coder.num_shared_experts) == (62, 160, 0)
    # Kimi K2: DeepSeek-V3's MLA with half the heads, 384 experts, one dense layer, one expert group
    assert (kimi.num_heads, kimi.kv_lora_rank, kimi.num_moe_layers, kimi.num_experts, kimi.router_groups) == \
        (64, 512, 60, 384, 0)
    assert (kimi.router, kimi.router_scaling_factor, kimi.router_expert_bias) == ("sigmoid_topk", 2.827, True)
    # the model cards' totals: 1T / 32B active, 480B / 35B active
    assert kimi.num_parameters() == pytest.approx(1.03e12, rel=0.01)
    assert kimi.num_active_parameters() == pytest.approx(32.9e9, rel=0.01)
    assert coder.num_active_parameters() == pytest.approx(35.5e9, rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("name, file", PRESETS.items())
def test_parameter_counts_equal_transformers(data_dir, name, file):
    """transformers' own model class built from the stored config on the meta device (no weights)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    data = _config(data_dir, file)
    keys = {k: v for k, v in data.items() if k not in ("_comment", "model_type", "quantization_config")}
    # Kimi K2's auto_map loads DeepSeek-V3's code (configuration_deepseek.DeepseekV3Config)
    config = transformers.AutoConfig.for_model({"kimi_k2": "deepseek_v3"}.get(data["model_type"], data["model_type"]),
                                               **keys)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    preset = load_preset(name)
    unused = experts * (preset.num_experts - preset.num_experts_per_token) // preset.num_experts if experts else 0
    assert (preset.num_parameters(), preset.num_active_parameters()) == (total, total - unused)


@pytest.mark.parametrize("model, preset", [
    ("Llama-3.3-70B-Instruct", "llama3-70b"), ("nvidia/Llama-3.3-70B-Instruct-FP4", "llama3-70b"),
    ("DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"), ("DeepSeek-R1-Distill-Qwen-14B", "qwen2.5-14b"),
    ("DeepSeek-R1-Distill-Qwen-7B", "qwen2.5-7b"), ("DeepSeek-V3.1-Terminus", "deepseek-v3"),
    ("Kimi-K2-Instruct", "kimi-k2"), ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"), ("Kimi-K2-Thinking", "kimi-k2"),
    ("Qwen3-8B", "qwen3-8b"), ("Qwen/Qwen3-14B-FP8", "qwen3-14b"), ("Qwen3-32B", "qwen3-32b"),
    ("Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("Qwen3-Coder-480B-A35B-Instruct-FP8", "qwen3-coder-480b-a35b"), ("Mistral-7B-Instruct-v0.3", "mistral-7b"),
    ("Mistral-Large-Instruct-2411", "mistral-large-2"), ("Mistral-Large-2", "mistral-large-2"),
    ("GLM-4.5", "glm-4.5"), ("GLM-4.5-FP8", "glm-4.5"), ("zai-org/GLM-4.6", "glm-4.6"), ("GLM-4.6-FP8", "glm-4.6"),
    ("GLM-4.5-Air", "glm-4.5-air"), ("zai-org/GLM-4.5-Air-FP8", "glm-4.5-air"), ("GLM-4.7", "glm-4.6"),
    ("MiniMax-M2", "minimax-m2"), ("MiniMaxAI/MiniMax-M2", "minimax-m2"),
])
def test_serving_names_resolve(model, preset):
    assert model_preset(model) == preset


@pytest.mark.parametrize("model, says", [
    ("DeepSeek-V3.2-Exp", "Sparse Attention"), ("deepseek-ai/DeepSeek-V3.2", "Sparse Attention"),
    ("Qwen3-Next-80B-A3B-Instruct", "linear attention"), ("Qwen3.5-397B-A17B", "linear attention"),
    ("zai-org/GLM-5-FP8", "Sparse Attention"), ("MiniMax-M1-80k", "lightning"), ("MiniMax-Text-01", "lightning"),
    ("Mistral-7B-Instruct-v0.1", "sliding window"),
])
def test_models_the_graph_cannot_express_are_refused_saying_why(model, says):
    with pytest.raises(RowProblem, match=says) as err:
        model_preset(model)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"no model preset for {model!r}: ")


def test_released_formats():
    assert NATIVE_PRECISIONS["kimi-k2"][0] == NATIVE_PRECISIONS["minimax-m2"][0] == "fp8"
    assert "glm-4.5" not in NATIVE_PRECISIONS  # BF16 release; -FP8 names its format
    assert (name_precision("GLM-4.5-FP8"), name_precision("zai-org/GLM-4.5-Air")) == ("fp8", "")
    assert (name_precision("Kimi-K2-Thinking"), name_precision("", "moonshotai/Kimi-K2-Thinking")) == ("w4a16", "w4a16")
    assert name_precision("Kimi-K2-Instruct") == ""


_ROW = dict(id="x", source="", hf_model_id="", arch="", params_b="", pp="", ep="", dp="", engine_version="",
            isl="1024", osl="1024", concurrency_or_batch="64", metric="output_tokens_per_s", value="1000",
            unit="tokens/s", notes="")


def test_kimi_rows_are_served_in_their_released_format():
    instruct = case_from_row({**_ROW, "model": "Kimi-K2-Instruct", "gpu": "B200", "gpus": "8", "tp": "8",
                              "precision": "", "engine": "sglang"})
    assert instruct.deployment.weight_dtype == "fp8" and instruct.deployment.model.name == "kimi-k2"
    with pytest.raises(RowProblem, match="w4a16"):  # INT4 weight-only: no engine preset serves it
        case_from_row({**_ROW, "model": "Kimi-K2-Thinking", "gpu": "B200", "gpus": "8", "tp": "8", "precision": "",
                       "engine": "sglang"})


def _row(row_id: str, model: str, gpu: str, gpus: int, precision: str, engine: str, metric: str, unit: str) -> dict:
    return {**_ROW, "id": row_id, "model": model, "gpu": gpu, "gpus": str(gpus), "tp": str(gpus),
            "precision": precision, "engine": engine, "metric": metric, "unit": unit}


def test_rows_naming_the_new_presets_are_priced():
    """Made-up rows (no measurement: value 1) of each kind of new preset get a prediction; the
    decode step of a dense model cannot beat reading its weights once from HBM."""
    rows = [_row("qwen3", "Qwen/Qwen3-32B-FP8", "H100-SXM-80GB", 1, "", "vllm", "tpot_median", "ms"),
            _row("qwen25", "Qwen2.5-72B-Instruct", "H100-SXM-80GB", 4, "bf16", "vllm", "output_tokens_per_s", "tokens/s"),
            _row("mistral", "Mistral-7B-Instruct-v0.3", "H100-SXM-80GB", 1, "bf16", "sglang", "ttft_mean", "ms"),
            _row("coder", "Qwen3-Coder-480B-A35B-Instruct-FP8", "H200", 8, "", "vllm", "output_tokens_per_s", "tokens/s"),
            _row("kimi", "Kimi-K2-Instruct", "B200", 8, "", "sglang", "tpot_median", "ms")]
    checks = {c.row_id: c for c in check_serving_rows(rows)}
    assert all(c.reason == "" and c.predicted > 0 for c in checks.values()), [c.reason for c in checks.values()]
    weights_s = load_preset("qwen3-32b").num_parameters() * 1 / 3.35e12  # FP8 bytes over H100 SXM HBM3 3.35 TB/s
    assert checks["qwen3"].predicted > 1e3 * weights_s


def test_glm_and_minimax_shapes():
    glm, air, glm46, minimax = (load_preset(n) for n in ("glm-4.5", "glm-4.5-air", "glm-4.6", "minimax-m2"))
    # the model cards' totals (GLM-4.5: 355B / 32B active, Air: 106B / 12B, MiniMax-M2: 230B / 10B), within the
    # MTP layers transformers does not build and the embeddings the cards' active counts leave out
    assert glm.num_parameters() == pytest.approx(355e9, rel=0.02) and air.num_parameters() == pytest.approx(106e9, rel=0.02)
    assert minimax.num_parameters() == pytest.approx(230e9, rel=0.01)
    assert (glm.num_moe_layers, glm.qk_norm, air.qk_norm, glm.kv_dim) == (89, "head", "none", 1024)
    assert glm46.with_changes(max_seq_len=131072, name="glm-4.5", source="") == glm.with_changes(source="")
    assert (minimax.num_moe_layers, minimax.qk_norm, minimax.fp8_block_scaled) == (62, "full", True)


def test_glm_and_minimax_rows_are_priced():
    """Made-up rows (value 1) of the new presets get a prediction; a MiniMax-M2 row that states no precision
    is served in its FP8 release, and a decode step cannot beat reading the active weights once from HBM."""
    rows = [_row("glm", "zai-org/GLM-4.5-FP8", "H200", 8, "", "sglang", "tpot_median", "ms"),
            _row("air", "GLM-4.5-Air", "H100-SXM-80GB", 4, "bf16", "vllm", "output_tokens_per_s", "tokens/s"),
            _row("minimax", "MiniMaxAI/MiniMax-M2", "B200", 4, "", "vllm", "tpot_median", "ms")]
    checks = {c.row_id: c for c in check_serving_rows(rows)}
    assert all(c.reason == "" and c.predicted > 0 for c in checks.values()), [c.reason for c in checks.values()]
    case = case_from_row(rows[2])
    assert case.deployment.weight_dtype == "fp8" and case.deployment.model.name == "minimax-m2"
    # 64 sequences of top-8 of 256 experts touch nearly all of them: at least the active weights per GPU
    floor_s = load_preset("glm-4.5").num_active_parameters() / 8 / 4.8e12  # FP8 bytes over H200's 4.8 TB/s
    assert checks["glm"].predicted > 1e3 * floor_s


def test_a_full_width_qk_norm_all_reduces_its_sums_under_tp():
    """MiniMax-M2's RMSNorm over all of q and k needs every TP rank's sums of squares (SGLang's and
    vLLM's MiniMaxM2RMSNormTP): one more all-reduce per layer, none on one GPU or under DP attention."""
    from autotune.cost.serving_step import ReplicaShape, step_model
    from autotune.spec.hardware_data import load_cluster

    full = load_preset("minimax-m2")
    head = full.with_changes(qk_norm="head")  # the same shapes normalised per head: no cross-rank sums

    def step(model, shape):
        return step_model(model, load_cluster("dgx-h100").for_gpus(shape.tp), shape, weight_dtype="fp8", kv_bytes=1,
                          max_tokens=64, max_sampled=8).linear_s[8]

    tp8 = ReplicaShape(tp=8, ep=8)
    extra = step(full, tp8) - step(head, tp8)
    assert 62 * 2e-6 < extra < 62 * 100e-6  # 62 layers of one latency-bound all-reduce, microseconds each
    one_gpu = step(full, ReplicaShape(tp=1)) - step(head, ReplicaShape(tp=1))
    dp = step(full, ReplicaShape(tp=8, ep=8, attention_dp=True)) - step(head, ReplicaShape(tp=8, ep=8, attention_dp=True))
    assert abs(one_gpu) < 0.1 * extra and abs(dp) < 0.1 * extra
