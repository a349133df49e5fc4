"""scripts/trtllm_maxload_step.py: a step's parts add up to what the step model prices for it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model
from autotune.spec.json_file import read_csv_file

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("trtllm_maxload_step", ROOT / "scripts" / "trtllm_maxload_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _step(row_id: str, tokens: int):
    rows = read_csv_file(str(ROOT / "tests" / "data" / "trtllm_1_0_perf_overview.csv"), "csv")[1]
    dep = case_from_row(next(r for r in rows if r["id"] == row_id)).deployment
    return replica_step_model(dep, max_tokens=tokens, max_sampled=tokens)


@pytest.mark.parametrize("row_id", ["trt10-074", "trt10-033"])  # DeepSeek-R1 under DP attention; Llama 3.3 70B at TP 1
@pytest.mark.parametrize("decodes, prompt_tokens", [(1000, 0), (400, 4000)])
def test_parts_sum_to_the_priced_step(row_id, decodes, prompt_tokens):
    script, step = _script(), _step(row_id, 6000)
    context, pairs, sampled = decodes * 2000.0, prompt_tokens * 500.5, decodes + prompt_tokens // 1000
    parts = script.step_parts(step, decodes, context, prompt_tokens, pairs, sampled)
    priced = step.gpu_s(decodes=decodes, context=context, prefill_tokens=prompt_tokens, pairs=pairs, sampled=sampled)
    assert parts["total"] == pytest.approx(1e3 * priced, rel=1e-9)
    assert parts["exchange"] <= parts["replica_linear"]
    assert (parts["rank_own"] > 0) == (step.dp_ranks > 1)  # a rank's own operators exist only under DP attention
