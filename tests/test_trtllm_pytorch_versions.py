"""TensorRT-LLM 0.19-0.21: trtllm-bench on the PyTorch backend, as those releases' performance overviews
ran it. Rows naming these releases take `tensorrt-llm-0.19`; it serves NVFP4 on Blackwell where the 0.18.2
C++ preset below it refuses, runs whole prompts in a budget trtllm-bench raises to fit them where 0.17's
engine chunks them, and refuses MXFP4 (GPT-OSS) where 1.0 above it serves it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import engine_runtime
from autotune.cost.serving_limits import bench_param_count, trtllm_bench_setting
from autotune.errors import AutotuneError
from autotune.spec.runtime import load_runtime
from tests.serving_deployments import deployment as _deployment
from tests.serving_deployments import max_throughput_limits as _limits

CHECK = Path(__file__).parent / "data" / "trtllm_pytorch_versions_check.csv"
_GIB = 2.0**30


@pytest.mark.parametrize(("version", "preset"), [
    ("0.18.2", "tensorrt-llm"),  # trtllm-serve's C++ path
    ("0.19.0", "tensorrt-llm-0.19"),
    ("0.20.0rc3", "tensorrt-llm-0.19"),
    ("0.21", "tensorrt-llm-0.19"),
    ("0.21.0 (PyTorch backend, trtllm-bench)", "tensorrt-llm-0.19"),
    ("1.0.0rc4", "tensorrt-llm-1.0"),
    ("1.1.0", "tensorrt-llm-1.0"),
    ("1.2.0rc1", "tensorrt-llm-1.0"),
])
def test_a_rows_release_picks_the_preset_of_its_behaviour(version, preset):
    assert engine_runtime("tensorrt-llm", version).name == preset


def test_0_19_serves_nvfp4_on_b200_with_trtllm_benchs_limits_where_0_14_refuses_it():
    with pytest.raises(AutotuneError, match="not nvfp4"):  # NVFP4 from 0.17 (release-notes.md); 0.18.2 serves it
        _deployment("tensorrt-llm-0.14", model="llama3-70b", cluster="dgx-b200", dtype="nvfp4")
    dep = _deployment("tensorrt-llm-0.19", model="llama3-70b", cluster="dgx-b200", dtype="nvfp4")
    limits = _limits(dep, 128, 2048)
    model = dep.model
    # tuning.py counts an NVFP4 weight as half a byte of the safetensors' element count, and the ModelOpt
    # checkpoint's FP8 KV as one
    seqs, tokens = trtllm_bench_setting(
        params_b=bench_param_count(model, "nvfp4") / 1e9, num_layers=model.num_layers, num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim, tp=1, device_memory_gib=dep.cluster.device.memory_bytes / _GIB,
        weight_bytes=0.5, kv_bytes=1.0, input_len=128, output_len=2048)
    assert limits.max_num_seqs == seqs
    assert limits.max_num_batched_tokens == max(tokens, 128 + seqs)  # general.py: max ISL + max_batch_size


def test_0_19_runs_whole_prompts_where_0_17s_engine_chunks_them():
    old = _limits(_deployment("tensorrt-llm-0.17", model="llama3-70b", cluster="dgx-h200", dtype="fp8"), 20000, 2000)
    new = _limits(_deployment("tensorrt-llm-0.19", model="llama3-70b", cluster="dgx-h200", dtype="fp8"), 20000, 2000)
    assert old.max_num_batched_tokens < 20000
    assert new.max_num_batched_tokens == 20000 + new.max_num_seqs
    # 0.18.2's trtllm-serve keeps BuildConfig's 8192 tokens a step, under which a 20,000-token prompt never runs
    assert load_runtime("tensorrt-llm").serving.max_num_batched_tokens == 8192


def test_0_19_refuses_mxfp4_experts_where_1_0_serves_them():
    with pytest.raises(AutotuneError, match="not mxfp4"):
        _deployment("tensorrt-llm-0.19", model="gpt-oss-120b", cluster="dgx-b200", dtype="mxfp4")
    assert _limits(_deployment("tensorrt-llm-1.0", model="gpt-oss-120b", cluster="dgx-b200", dtype="mxfp4"),
                   1000, 1000).max_num_seqs > 0


def test_0_19_is_the_pytorch_backend_not_the_cpp_path_below_it():
    new, cpp = load_runtime("tensorrt-llm-0.19").serving, load_runtime("tensorrt-llm").serving
    # prompts run the PyTorch model eagerly, decodes replay the overview's CUDA graphs (batch sizes to 8192);
    # the C++ path enqueues a compiled engine for both
    assert (new.eager_prefill, cpp.eager_prefill) == (True, False)
    assert new.decode_cuda_graph_max_batch >= 4096  # trtllm-bench's largest max_batch_size (tuning.py)
    assert (new.kv_block_tokens, cpp.kv_block_tokens) == (32, 64)
    assert (new.memory_fraction, cpp.memory_fraction) == (0.95, 0.9)
    assert new.supports_attention_dp and not cpp.supports_attention_dp


def _check_rows(*versions: str) -> list[dict]:
    with open(CHECK, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r for r in rows if r["engine_version"].split(" ")[0] in versions]


def test_one_row_of_each_release_is_priced_by_its_preset():
    rows = _check_rows("0.19.0", "0.20.0", "0.21.0")
    picked = [next(r for r in rows if r["engine_version"].startswith(v) and r["gpu"].startswith("B200"))
              for v in ("0.19.0", "0.20.0", "0.21.0")]
    checks = check_serving_rows(picked)
    assert all(c.error_pct is not None and c.runtime == "tensorrt-llm-0.19" for c in checks), \
        [(c.row_id, c.reason) for c in checks]


@pytest.mark.slow
def test_every_check_row_is_priced():
    with open(CHECK, newline="") as handle:
        rows = list(csv.DictReader(handle))
    checks = check_serving_rows(rows)
    assert len(checks) == len(rows) == 66
    assert [c.row_id for c in checks if c.error_pct is None] == []
    assert {c.runtime for c in checks if c.row_id.startswith(("trt019", "trt020", "trt021"))} == {"tensorrt-llm-0.19"}
    assert {c.runtime for c in checks if c.row_id.startswith("trt1x")} == {"tensorrt-llm-1.0"}
