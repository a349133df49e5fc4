"""spec/serving_kernel_rows.py: a serving engine's measured kernel rows are refused when malformed or repeated,
and a lookup answers the most specific GPU key's row at the KV dtype (or head_dim, heads) asked, None else."""

from __future__ import annotations

import pytest

from autotune.errors import AutotuneError
from autotune.spec.serving_engine import ServingEngine


def _engine(**rows) -> ServingEngine:
    return ServingEngine(engine="vllm", version="0.10.0", **rows)


@pytest.mark.parametrize("field, rows", [
    ("decode_attention", [["h100", "fp16", 1e-5, 1e-7]]),  # not a KV dtype a row can name
    ("decode_attention", [["h100", "bf16", 1e-5, 1e-7], ["h100", "bf16", 2e-5, 1e-7]]),  # repeated
    ("prefill_attention", [["h100", 128, 1e-5, 0]]),  # seconds per FLOP not positive
    ("mla_decode_attention", [["b200", "fp8", 0, 1e-5, 1e-7, 1e-9]]),  # no heads
    ("mla_prefill_attention", [["b200", "fp8", 16, 1e-5, 1e-7]]),  # a value missing
    ("mla_bmm", [["b200", "fp8", 16, 1e-5, 2.0]])])  # seconds per token of 2
def test_a_malformed_row_is_refused_naming_its_field(field, rows):
    with pytest.raises(AutotuneError, match=f"serving.{field}"):
        _engine(**{field: rows})


def test_the_most_specific_gpu_key_with_a_row_answers():
    engine = _engine(decode_attention=[["h100", "bf16", 1e-5, 1e-7], ["h100", "fp8", 3e-5, 3e-7],
                                       ["h100-sxm", "fp8", 2e-5, 2e-7]],
                     prefill_attention=[["h100", 128, 3e-5, 1e-15]],
                     mla_decode_attention=[["b200", "fp8", 16, 1e-5, 1e-7, 1e-9], ["b200", "fp8", 128, 2e-5, 2e-7, 2e-9]])
    keys = ("h100-sxm", "h100")
    assert engine.decode_attention_fit(keys, 1.0) == (2e-5, 2e-7, 0.0)  # FP8 KV: the specific key's row, not the family's
    assert engine.decode_attention_fit(keys, 2.0) == (1e-5, 1e-7, 0.0)  # BF16 KV: only the family has one
    assert engine.decode_attention_fit(keys, 4.0) is None  # no row names an FP32 cache
    assert engine.prefill_attention_fit(keys, 128) == (3e-5, 1e-15)
    assert engine.prefill_attention_fit(keys, 64) is None
    assert engine.mla_decode_attention_fit(("b200",), 1.0, 128) == (2e-5, 2e-7, 2e-9)
    assert engine.mla_decode_attention_fit(("b200",), 2.0, 16) is None
    assert engine.mla_prefill_attention_fit(("b200",), 1.0, 16) is None
