"""MLA decode attention is compute-bound, GQA's memory-bound; trtllm-bench's heuristic reads the
checkpoint's stored element count and its config's head size."""

from __future__ import annotations

import pytest

from autotune.cost.runtime_kernels import gpu_keys
from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.cost.serving_limits import bench_head_size, bench_param_count
from autotune.graph.operators import decode_attention
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def _step(model: str, cluster: str, tp: int, runtime: str = "tensorrt-llm-1.0", **kw):
    dep = ServingDeployment(model=resolve_model(model), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                            tp=tp, replicas=1, weight_dtype="fp8", **kw)
    return dep, replica_step_model(dep, max_tokens=1, max_sampled=1)


def _per_position(dep, kind: str) -> float:
    """One cached position's read or FLOPs, all layers' worth divided as the step model divides them."""
    device = dep.cluster.device
    one, two = (decode_attention(dep.model, c, 1) for c in (1.0, 2.0))
    if kind == "read":
        shards = dep.tp if dep.attention_dp else dep.model.kv_cache_shards(dep.tp)
        return (two["in_bytes"] - one["in_bytes"]) / shards * device.memory_regression("stream").seconds_per_unit
    return (two["flops"] - one["flops"]) / dep.tp * device.regression("attention", "bf16").seconds_per_unit


def test_mla_decode_pays_its_flops_and_gqa_decode_its_reads():
    # vLLM states no measured MLA op (TensorRT-LLM's: tests/test_serving_mla_measured.py): the generic roofline
    mla, step = _step("deepseek-v3", "dgx-h200", 8, "vllm", ep=8, attention_dp=True)
    eff = mla.cluster.device.kernel_efficiency
    assert _per_position(mla, "flops") > 2 * _per_position(mla, "read")  # 128 heads score one shared latent
    assert step.decode_s_per_position == pytest.approx(_per_position(mla, "flops") / eff)
    gqa, step = _step("llama3-70b", "dgx-h200", 4)
    assert _per_position(gqa, "read") > 2 * _per_position(gqa, "flops")  # 8 query heads a KV head
    # TensorRT-LLM's measured decode-attention op on Hopper GQA (serving_attention.attention_coefficients): the
    # cached bytes at the stream fit itself, the kernel's efficiency in its measured per-head cost instead
    assert gqa.runtime.serving.decode_attention_fit(gpu_keys(gqa.cluster.device.name), 1.0) is not None
    assert step.decode_s_per_position == pytest.approx(_per_position(gqa, "read"))


def test_trtllm_benchs_param_count_is_the_checkpoints_stored_elements():
    llama = resolve_model("llama3-70b")
    assert bench_param_count(llama, "fp8") == llama.num_parameters()  # one F8_E4M3 element a weight
    embeddings = 2 * llama.vocab_size * llama.hidden_size  # untied embedding and head stay BF16
    fp4 = bench_param_count(llama, "nvfp4")  # U8 pairs plus an F8 scale per 16
    assert fp4 == pytest.approx(embeddings + (llama.num_parameters() - embeddings) * (0.5 + 1 / 16))
    oss = resolve_model("gpt-oss-120b")  # MXFP4 experts only: attention, router, embeddings whole
    experts = oss.num_moe_layers * oss.num_experts * 3 * oss.hidden_size * oss.expert_ffn_hidden_size
    assert 0.9 * oss.num_parameters() < experts < oss.num_parameters()
    assert bench_param_count(oss, "mxfp4") == pytest.approx(oss.num_parameters() - experts * (1 - 0.5 - 1 / 32), rel=0.01)


def test_trtllm_benchs_head_size_is_the_configs_else_hidden_over_heads():
    assert bench_head_size(resolve_model("llama3-70b")) == 128
    assert bench_head_size(resolve_model("qwen3-235b-a22b")) == 128  # config.json head_dim, not 4096 / 64
    assert bench_head_size(resolve_model("deepseek-v3")) == 7168 // 128  # configuration_deepseek.py sets none
