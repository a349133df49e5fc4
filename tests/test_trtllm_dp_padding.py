"""TensorRT-LLM's attention-DP MoE padded to the busiest rank's rows (cost/trtllm_dp_padding.py): which MoE
blocks pad (Llama 4 always; DeepSeek-V3 / Qwen3-MoE with NVFP4 or TRTLLM-Gen experts), and what a step prices."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model
from autotune.cost.serving_step import StepModel
from autotune.cost.trtllm_dp_padding import pads_dp_moe
from autotune.spec.presets import load_preset

ROWS = "tests/data/trtllm_pytorch_versions_check.csv"


@pytest.mark.parametrize("name, dtype, backend, engine, dp, tp, version, pads", [
    ("llama4-maverick-17b-128e", "fp8", "", "tensorrt-llm", True, 8, "0.20.0", True),  # Llama4MoE: always
    ("llama4-maverick-17b-128e", "fp8", "", "tensorrt-llm", True, 8, "1.0.0", False),  # use_dp_padding=False
    ("deepseek-v3", "fp8", "", "tensorrt-llm", True, 8, "0.21.0", False),  # block-FP8 CUTLASS: own counts
    ("deepseek-v3", "nvfp4", "", "tensorrt-llm", True, 8, "0.21.0", True),  # NVFP4: padded
    ("deepseek-v3", "fp8", "trtllm", "tensorrt-llm", True, 8, "0.19.0", True),  # TRTLLM-Gen experts: padded
    ("qwen3-235b-a22b", "fp8", "", "tensorrt-llm", True, 8, "0.21.0", False),
    ("qwen3-235b-a22b", "nvfp4", "", "tensorrt-llm", True, 8, "0.21.0", True),
    # PR #6064 (2025-07-18, before 1.0.0rc5) removed DeepSeek-V3 / Qwen3-MoE's padding off SM120
    ("deepseek-v3", "nvfp4", "", "tensorrt-llm", True, 8, "1.0.0", False),
    ("deepseek-v3", "fp8", "trtllm", "tensorrt-llm", True, 8, "1.2.0rc2", False),
    ("qwen3-235b-a22b", "nvfp4", "", "tensorrt-llm", True, 8, "", False),  # no number: the newest
    ("llama4-maverick-17b-128e", "fp8", "", "tensorrt-llm", False, 8, "0.20.0", False),  # no attention DP
    ("llama4-maverick-17b-128e", "fp8", "", "sglang", True, 8, "0.5.6", False),  # another engine
])
def test_which_moe_blocks_pad(name, dtype, backend, engine, dp, tp, version, pads):
    assert pads_dp_moe(engine, load_preset(name), dtype, backend, dp, tp, version) is pads


def test_the_1_0_deepseek_nvfp4_dep_rows_price_unpadded():
    rows = csv.DictReader(open("tests/data/trtllm_1_0_perf_overview.csv", encoding="utf-8"))
    deps = [d for d in (case_from_row(r).deployment for r in rows if "DeepSeek" in r["model"]) if d.attention_dp]
    assert deps, "the 1.0 page has DeepSeek-R1 NVFP4 attention-DP rows"
    assert not any(replica_step_model(d, max_tokens=8192, max_sampled=512).dp_padded_moe for d in deps)


def _step(padded: bool) -> StepModel:
    tokens = np.arange(4097, dtype=float)
    return StepModel(linear_s=1e-5 * tokens, head_s=np.zeros(4097), num_layers=1, decode_lat_s=0.0,
                     decode_s_per_position=0.0, decode_s_per_request=0.0, prefill_lat_s=0.0, prefill_s_per_pair=0.0,
                     weight_bytes_per_gpu=0.0, kv_bytes_per_token_per_gpu=0.0, dp_ranks=4,
                     rank_linear_s=np.zeros(4097), dp_padded_moe=padded)


def test_a_prompt_on_one_rank_pads_every_rank_to_its_rows():
    # 8 decodes (2 a rank) and one 1,000-token prompt on one rank: 4 x 1,002 rows padded, 1,008 unpadded
    kwargs = dict(decodes=8, context=0.0, prefill_tokens=1000, pairs=0.0, sampled=9, rank_prefill=(1000, 0.0))
    assert _step(True).gpu_s(**kwargs) == pytest.approx(1e-5 * 4 * 1002)
    assert _step(False).gpu_s(**kwargs) == pytest.approx(1e-5 * 1008)


def test_decode_only_steps_do_not_move():
    kwargs = dict(decodes=10, context=0.0, prefill_tokens=0, pairs=0.0, sampled=10)
    assert _step(True).gpu_s(**kwargs) == _step(False).gpu_s(**kwargs)


def test_the_maverick_dep_row_prices_padded_before_1_0_only():
    row = {r["id"]: r for r in csv.DictReader(open(ROWS, encoding="utf-8"))}["trt1x-011"]
    dep = case_from_row(row).deployment  # the 1.x revision: unpadded
    assert not replica_step_model(dep, max_tokens=16384, max_sampled=1024).dp_padded_moe
    engine = dep.runtime.serving.with_changes(version="0.21.0")
    dep = replace(dep, runtime=dep.runtime.with_changes(serving=engine))
    step = replica_step_model(dep, max_tokens=16384, max_sampled=1024)
    assert step.dp_padded_moe
    even = dict(decodes=800, context=0.0, prefill_tokens=1000, pairs=0.0, sampled=801)
    # one rank holds the whole prompt: dearer than the same tokens spread evenly
    assert step.gpu_s(**even, rank_prefill=(1000, 0.0)) > replace(step, dp_padded_moe=False).gpu_s(**even, rank_prefill=(1000, 0.0))
