"""TensorRT-LLM's padded decode graphs (cost/graph_padding.py): a generation-only step runs the next captured
batch size, the sizes capped at the executor's largest decode batch, each attention-DP rank padded alike."""

from __future__ import annotations

import pytest

from autotune.cost.graph_padding import graph_sizes, padded_batch
from autotune.spec.runtime import load_runtime

OVERVIEW = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


def test_sizes_stop_at_the_largest_decode_batch_and_add_it():
    assert graph_sizes(OVERVIEW, 3328)[-3:] == (1024, 2048, 3328)
    assert graph_sizes(OVERVIEW, 8192) == OVERVIEW
    assert graph_sizes((1, 2, 4), 100) == (1, 2, 4)  # nothing configured above it: nothing added
    assert graph_sizes((), 3328) == ()


@pytest.mark.parametrize("decodes, ranks, rows", [
    (1100, 1, 2048), (1024, 1, 1024), (300, 1, 384), (5, 1, 8),
    (2582, 2, 4096),  # 1,291 a rank -> 2,048 a rank
    (9000, 1, 9000),  # beyond the largest graph: eager, unpadded
    (0, 1, 0),
])
def test_a_step_runs_the_next_captured_size(decodes, ranks, rows):
    assert padded_batch(decodes, OVERVIEW, ranks) == rows


def test_unpadded_without_sizes():
    assert padded_batch(1100, ()) == 1100


def test_the_1_0_preset_states_the_overviews_list_and_vllm_none():
    assert load_runtime("tensorrt-llm-1.0").serving.decode_graph_batch_sizes == OVERVIEW
    assert load_runtime("vllm").serving.decode_graph_batch_sizes == ()
