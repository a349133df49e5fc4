"""A 16-bit GEMM over a dimension that is not a multiple of 8 runs cuBLAS's align1 kernels
(graph/opstream.py gemm_unaligned; measured on an H200, tests/data/h200/check-2026-11-27)."""

from dataclasses import replace

import pytest

from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.graph.opstream import stream_operators
from autotune.plan.builders import uniform_plan
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster
from autotune.spec.runtime import Runtime, load_runtime
from autotune.spec.workload import TrainingWorkload


def _head_kinds(vocab: int) -> set[str]:
    model = replace(load_preset("gpt3-1.3b"), vocab_size=vocab)
    return {op.kind for op in stream_operators("torch-gpt", "head", model, 2048) if op.name == "logits"}


def test_an_odd_vocabulary_makes_the_lm_head_gemms_unaligned():
    assert _head_kinds(50257) == {"gemm_unaligned"}
    assert _head_kinds(50304) == {"gemm"}
    model = load_preset("gpt3-1.3b")  # the layers' GEMMs are aligned whatever the vocabulary
    assert "gemm_unaligned" not in {op.kind for op in stream_operators("torch-gpt", "layer", model, 2048)}


def _step_s(vocab: int, cluster: str) -> float:
    model = replace(load_preset("gpt3-1.3b"), vocab_size=vocab)
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, micro_batch=8, global_batch=8)
    return evaluate_plan(model, TrainingWorkload(global_batch=8, seq_len=2048), resolve_cluster(cluster), plan,
                         runtime=load_runtime("torch")).step_time_s


def test_padding_the_vocabulary_saves_what_the_h200_trace_showed():
    # the trace: 83 ms of head GEMMs at 50,257 against ~13 ms at the aligned rate, in a 0.38 s step
    saved = _step_s(50257, "dgx-h200") - _step_s(50304, "dgx-h200")
    assert 0.05 < saved < 0.09
    # on an A100 the runtime states no unaligned speed: 47 more vocabulary rows cost almost nothing
    assert abs(_step_s(50257, "dgx-a100-80gb") / _step_s(50304, "dgx-a100-80gb") - 1) < 0.01


@pytest.mark.parametrize("value", [[["hopper", 0.1]], [["hopper", 0.0, 0.2]], [["hopper", 0.1, 1.5]]])
def test_the_unaligned_speed_is_validated(value):
    with pytest.raises(AutotuneError, match="gemm_unaligned_speed"):
        Runtime(name="x", gemm_unaligned_speed=value)
