"""scripts/vllm_moe_step_kernels.py: which of aiconfigurator's vLLM rows a Qwen3-MoE row's measured step reads (the
TP-sharded projections, the row's expert sharding, the CUDA-graph all-reduce at the step's message, the replicated
KV head), on small synthetic tables: a row of another shape, sharding or backend carries a latency that would show."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]
WRONG_MS = 99.0  # any row the step must not read


def _script():
    spec = importlib.util.spec_from_file_location("vllm_moe_step_kernels", ROOT / "scripts" / "vllm_moe_step_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _qwen3_model():
    from autotune.calibrate.serving_rows import case_from_row

    with open(ROOT / "tests" / "data" / "vllm_newer_check.csv", newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["id"] == "vn-qw-02")  # Qwen3-235B-A22B BF16, TP 8
    return case_from_row(row).deployment.model


def _frames(model) -> dict:
    gemm = [dict(gemm_dtype=d, m=m, n=n, k=k, latency=ms) for m in (1, 4096)
            for d, n, k, ms in (("bfloat16", 1280, 4096, 0.010), ("bfloat16", 4096, 1024, 0.020),  # qkv (8 + 2 x 1 heads), o
                                ("bfloat16", 128, 4096, 0.001), ("bfloat16", 18992, 4096, 0.5),  # router, LM head / 8
                                ("fp8_block", 1280, 4096, WRONG_MS), ("fp8_block", 4096, 1024, WRONG_MS))]
    shape = dict(hidden_size=4096, num_experts=128, topk=8, inter_size=1536, moe_dtype="bfloat16")
    moe = [dict(shape, moe_tp_size=tp, moe_ep_size=ep, distribution=dist, num_tokens=t, latency=ms)
           for t in (1, 4096) for tp, ep, dist, ms in ((8, 1, "balanced", 0.3), (8, 1, "power_law_1.01", 0.4),
                                                        (1, 8, "balanced", WRONG_MS))]
    allreduce = [dict(num_gpus=8, backend=b, message_size=s, latency=ms * s / 1024)
                 for s in (1024, 1 << 24) for b, ms in (("vllm_graph", 0.001), ("vllm_eager", WRONG_MS))]
    attention = [dict(num_heads=8, num_key_value_heads=kv, kv_cache_dtype="bfloat16", batch_size=1024, isl=1, step=s,
                      latency=ms) for s in (1, 2047) for kv, ms in ((1, 0.05), (4, WRONG_MS))]
    return {"gemm": pd.DataFrame(gemm), "moe": pd.DataFrame(moe), "allreduce": pd.DataFrame(allreduce),
            "attention": pd.DataFrame(attention)}


def test_qwen3_tp8_step_reads_its_own_shapes_and_the_graph_all_reduce():
    s, model = _script(), _qwen3_model()
    got = s.measured_step_s(_frames(model), model, batch=1000, tp=8, ep=1, dtype="bf16")
    layers = model.num_layers
    assert got["attn_linears"] == pytest.approx(layers * 0.030e-3)
    assert got["router"] == pytest.approx(layers * 0.001e-3)
    assert got["experts balanced"] == pytest.approx(layers * 0.3e-3)
    assert got["experts power_law_1.01"] == pytest.approx(layers * 0.4e-3)
    # two all-reduces a layer of batch x hidden BF16 elements, on the sweep's line through its two points
    assert got["allreduce"] == pytest.approx(2 * layers * 0.001e-3 * 1000 * 4096 / 1024, rel=1e-6)
    assert got["lm_head"] == pytest.approx(0.5e-3)
    assert got["attention (eager)"] == pytest.approx(layers * 0.05e-3)  # 4 KV heads over 8 ranks: one replicated
