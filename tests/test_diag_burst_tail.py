"""scripts/diag_burst_tail.py's what-if and counter: cutting a length table's outputs touches only the outputs
above the cut, and the seconds counted at the API server's ceiling are the whole seconds whose streamed tokens
reach 95% of it (docs/serving.md, "The Qwen3-235B bursts' tail")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from autotune.cost.serving_lengths import request_lengths

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("diag_burst_tail", ROOT / "scripts" / "diag_burst_tail.py")
tail = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tail)


def test_cut_outputs_leave_prompts_and_shorter_outputs_alone():
    table = request_lengths("sharegpt")
    cut = tail.capped(table, 1000)
    assert cut.input_tokens == table.input_tokens and cut.percents == table.percents
    assert max(cut.output_tokens) == 1000 < max(table.output_tokens)
    assert all(c == q for c, q in zip(cut.output_tokens, table.output_tokens) if q <= 1000)
    _, outputs = cut.draw(1000, 0)
    assert outputs.max() <= 1000


def test_seconds_at_ceiling_counts_only_full_seconds():
    # 100 tokens in second 0, 96 in second 1, 50 in second 2: at a 100 tok/s ceiling, seconds 0 and 1 count
    tokens = np.concatenate([np.linspace(0.0, 0.99, 100), np.linspace(1.0, 1.99, 96), np.linspace(2.0, 2.99, 50)])
    assert tail.seconds_at_ceiling(tokens, 100.0) == 2
    assert tail.seconds_at_ceiling(tokens, float("inf")) == 0
    assert tail.seconds_at_ceiling(np.zeros(0), 100.0) == 0
