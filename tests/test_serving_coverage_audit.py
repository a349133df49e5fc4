"""scripts/serving_coverage_audit.py: synthetic rows in the check files' schema, read and priced by check-published's
own code, each refusal kept with its reason."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("serving_coverage_audit", ROOT / "scripts" / "serving_coverage_audit.py")
audit = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(audit)


def _rows(engine: str, version: str, gpu: str, hf_id: str, metric: str = "output_tokens_per_s") -> list[dict]:
    rows = [r for r in audit.engine_rows(engine, version, gpu) if r["hf_model_id"] == hf_id and r["metric"] == metric]
    return [dict(r, id=f"t-{n}") for n, r in enumerate(rows)]


def test_the_rows_carry_the_check_files_columns_and_spellings():
    with open(ROOT / "tests" / "data" / "sglang_newer_check.csv", newline="") as handle:
        header = set(csv.DictReader(handle).fieldnames)
    rows = audit.all_rows(("tensorrt-llm", "mlperf-nvidia"), ("GB200",), one_per_preset=True)
    assert all(set(r) == header for r in rows)
    assert {r["engine"] for r in rows} == {"tensorrt-llm", "mlperf-nvidia"}
    assert all(r["gpus"] == "4" for r in rows if r["engine"] == "mlperf-nvidia")  # a GB200 tray


def test_sglang_reads_gpt_oss_mxfp4_on_hopper_from_0_5_and_refuses_it_before():
    rows = _rows("sglang", "0.5.0rc2", "H100", "openai/gpt-oss-120b")
    assert rows and audit.refusals(rows, price=False) == []
    older = _rows("sglang", "0.4.10", "H100", "openai/gpt-oss-120b")
    refused = audit.refusals(older, price=False)
    assert len(refused) == len(older) and all("without FP4 tensor cores: sglang-0.4.8" in why for _, why in refused)


def test_pricing_refuses_a_model_whose_weights_leave_no_kv_cache_and_prices_one_that_fits():
    big = [dict(r, gpus="1", tp="1") for r in _rows("sglang", "0.5.2", "H100", "nvidia/Llama-3.1-405B-Instruct-FP8")
           if "inf" in r["concurrency_or_batch"]]
    small = [r for r in _rows("sglang", "0.5.2", "H100", "openai/gpt-oss-20b")
             if "inf" in r["concurrency_or_batch"] and r["tp"] == "1"]
    refused = audit.refusals(big + small, price=True)
    assert [r["hf_model_id"] for r, _ in refused] == ["nvidia/Llama-3.1-405B-Instruct-FP8"]
    assert "leave no KV cache" in refused[0][1]
    assert audit.refusals(big, price=False) == []  # memory is found short only when the row is simulated


def test_reasons_group_with_their_numbers_folded_and_their_formats_kept():
    one = audit.reason_key("llama3-405b's weights (381.9 GiB per GPU at tp=1) leave no KV cache on fp8 sglang-0.4.8")
    two = audit.reason_key("llama3-405b's weights (95.5 GiB per GPU at tp=4) leave no KV cache on fp8 sglang-0.4.8")
    assert one == two and "fp8" in one and "llama3-405b" in one and "sglang-N" in one
