"""Attention DP's per-rank batch limits (TensorRT-LLM) and the routed experts' grouped GEMMs in a serving step."""

from autotune.spec.presets import resolve_model
from autotune.cost.serving_limits import engine_limits
from autotune.spec.hardware_data import load_cluster
from autotune.spec.runtime import load_runtime


def _limits(runtime: str, attention_dp: bool):
    return engine_limits(load_runtime(runtime).serving, resolve_model("qwen3-235b-a22b"), load_cluster("dgx-h200"), tp=8,
                         weight_dtype="fp8", weight_bytes_per_gpu=35e9, kv_bytes_per_token_per_gpu=12032.0,
                         input_len=1000, output_len=1000, attention_dp=attention_dp)


def test_trtllm_attention_dp_schedules_max_batch_size_on_every_rank():
    # py_executor.py _fetch_new_requests: tp_size x max_num_active_requests under enable_attention_dp
    tp, dp = _limits("tensorrt-llm-1.0", False), _limits("tensorrt-llm-1.0", True)
    assert dp.max_num_seqs == 8 * tp.max_num_seqs
    assert dp.max_num_batched_tokens == 8 * tp.max_num_batched_tokens
    assert dp.kv_capacity_tokens == tp.kv_capacity_tokens  # memory per GPU is what it was


def test_other_engines_keep_one_scheduler_per_replica():
    for runtime in ("vllm", "sglang"):
        assert _limits(runtime, True).max_num_seqs == _limits(runtime, False).max_num_seqs
