"""scripts/sglang_prefill_kernels.py helpers shared with scripts/sglang_decode_kernels.py: which measured MoE rows
and KV format a row's kernel sum reads (Blackwell's TRTLLM-Gen MoE, Hopper's Triton fused MoE)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("sglang_prefill_kernels", ROOT / "scripts" / "sglang_prefill_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _moe_table(sources: list[str], distributions: list[str]) -> "pd.DataFrame":
    rows = [dict(hidden_size=7168, num_experts=256, inter_size=2048, topk=8, moe_dtype="fp8_block", moe_tp_size=8,
                 moe_ep_size=1, distribution=d, kernel_source=k, num_tokens=4, latency=float(i + 1))
            for i, (k, d) in enumerate((k, d) for k in sources for d in distributions)]
    other_shape = dict(rows[0], inter_size=1536, latency=99.0)  # another model's experts: never read
    return pd.DataFrame(rows + [other_shape])


def test_moe_rows_prefer_trtllm_gen_and_balanced_routing():
    s = _script()
    table = _moe_table(["sglang_fused_moe_triton", "sglang_flashinfer_trtllm_moe"], ["power_law_1.01", "balanced"])
    got = s.moe_rows(table, tp=8, ep=1, dtype="fp8")
    assert list(got.kernel_source) == ["sglang_flashinfer_trtllm_moe"]
    assert list(got.distribution) == ["balanced"]


def test_moe_rows_fall_back_to_triton_and_the_mildest_power_law_on_hopper_tables():
    s = _script()
    table = _moe_table(["sglang_fused_moe_triton"], ["power_law_1.2", "power_law_1.01"])  # H200 SGLang 0.5.6.post2
    got = s.moe_rows(table, tp=8, ep=1, dtype="fp8")
    assert list(got.kernel_source) == ["sglang_fused_moe_triton"]
    assert list(got.distribution) == ["power_law_1.01"]
    with pytest.raises(ValueError, match="moe_ep 8"):  # no rows at EP 8 at all: the kernel cannot be chosen
        s.moe_rows(table, tp=8, ep=8, dtype="fp8")


def test_kv_dtype_reads_the_rows_kv_cache_flag():
    s = _script()
    assert s.kv_dtype({"notes": "--kv-cache-dtype fp8_e4m3 --attention-backend trtllm_mla"}) == "fp8"
    assert s.kv_dtype({"notes": "--attention-backend flashinfer --stream-interval 10"}) == "bfloat16"
