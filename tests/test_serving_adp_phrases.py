"""How a row's notes say attention ran data-parallel (or did not): the reader takes the flags and words
sources print (TensorRT-LLM's enable_attention_dp and DEP<n> columns, SGLang's --enable-dp-attention)
and honours a stated "off"."""

from __future__ import annotations

import pytest

from autotune.calibrate.serving_degrees import RowDegrees, row_degrees
from autotune.calibrate.serving_rows import case_from_row
from autotune.errors import AutotuneError

ROW = dict(id="adp", source="test", model="DeepSeek-R1", hf_model_id="", arch="moe", params_b="671",
           gpu="H200-SXM-141GB", gpus="8", tp="8", pp="", ep="8", dp="", precision="fp8", engine="tensorrt-llm",
           engine_version="1.0", isl="1000", osl="1000", concurrency_or_batch="concurrency=256",
           metric="output_tokens_per_s", value="1", unit="tokens/s (8-GPU system)", notes="placeholder value")


@pytest.mark.parametrize("notes", ["DEP8 column", "enable_attention_dp: true, overlap scheduler off",
                                   "SGLang --tp 8 --enable-dp-attention", "attention data parallelism with EP 8",
                                   "data-parallel attention", "ep not stated; attention DP on", "ADP", "DP4 Attn + EP4 MoE",
                                   "dep16", "dp-attn:true"])
def test_stated_attention_dp_is_read(notes):
    assert case_from_row(dict(ROW, ep="", notes=notes)).deployment.attention_dp


@pytest.mark.parametrize("notes", ["TEP8 column", "no attention DP", "without attention DP", "enable_attention_dp: false",
                                   "data-parallel attention left at its default, off", "dp attention disabled",
                                   "DPA false", "(no DP attention)", "(DP attention not stated)",
                                   "the flag nests under cuda_graph_config (read as the default, attention DP off)"])
def test_attention_dp_stated_off_or_absent_is_not(notes):
    assert not case_from_row(dict(ROW, ep="", notes=notes)).deployment.attention_dp


def test_a_rows_degrees_are_a_named_layout_that_checks_itself():
    d = row_degrees(dict(ROW, notes="DEP8 column"), None)
    assert (d.tp, d.pp, d.replicas, d.ep, d.attention_dp, d.gpus) == (8, 1, 1, 8, True, 8)
    with pytest.raises(AutotuneError, match="replicas"):
        RowDegrees(tp=8, pp=1, replicas=0, ep=8, attention_dp=False)
