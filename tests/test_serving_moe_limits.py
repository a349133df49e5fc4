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
    # the KV estimate's profiling forward gathers every rank's max_num_tokens into the MoE: less KV per GPU
    assert dp.kv_capacity_tokens < tp.kv_capacity_tokens


def test_other_engines_keep_one_scheduler_per_replica():
    for runtime in ("vllm", "sglang"):
        assert _limits(runtime, True).max_num_seqs == _limits(runtime, False).max_num_seqs


def test_expert_rows_round_up_to_the_gemm_tile():
    import numpy as np

    from autotune.cost.expert_tiles import padded_row_share

    share = padded_row_share(np.array([0.0, 1.0, 16.0, 2048.0, 65536.0]), 128, 8, 64)
    assert share[0] == 1.0
    assert share[1] == 64.0  # one token: each of its 8 experts computes a whole 64-row tile
    assert 38.0 < share[2] < 44.0  # 1 row per expert on average: a 64-row tile for each of the ~64% of experts reached
    assert 1.15 < share[3] < 1.35  # 128 rows per expert: about half a tile of padding each
    assert 1.0 < share[4] < 1.01


def test_tile_padding_slows_small_moe_steps_where_compute_bound():
    import numpy as np

    from autotune.cost.serving_step import ReplicaShape, step_model
    from autotune.cost import serving_experts, serving_step

    model, cluster = resolve_model("mixtral-8x7b"), load_cluster("dgx-h100").for_gpus(8)
    padded = step_model(model, cluster, ReplicaShape(tp=8), weight_dtype="bf16", kv_bytes=2.0, max_tokens=2048, max_sampled=1)
    original = serving_experts.expert_row_share
    try:
        serving_experts.expert_row_share = lambda tokens, *a: np.ones_like(np.asarray(tokens, dtype=float))
        serving_step._step_model.cache_clear()
        flat = step_model(model, cluster, ReplicaShape(tp=8), weight_dtype="bf16", kv_bytes=2.0, max_tokens=2048, max_sampled=1)
    finally:
        serving_experts.expert_row_share = original
        serving_step._step_model.cache_clear()
    assert np.all(padded.linear_s >= flat.linear_s - 1e-12)
    assert padded.linear_s[2048] > 1.02 * flat.linear_s[2048]  # compute-bound: 512 rows per expert, ~6% padding


def test_attention_dp_step_waits_for_the_rank_running_the_prompt():
    from autotune.cost.serving_step import ReplicaShape, step_model

    model, cluster = resolve_model("mixtral-8x7b"), load_cluster("dgx-h100").for_gpus(8)
    adp = step_model(model, cluster, ReplicaShape(tp=8, attention_dp=True), weight_dtype="bf16", kv_bytes=2.0,
                     max_tokens=4096, max_sampled=64)
    step = dict(decodes=64, context=64 * 1000.0, prefill_tokens=2048, pairs=2048 * 1024.5, sampled=65)
    spread = adp.gpu_s(**step)
    whole = adp.gpu_s(**step, rank_prefill=(2048, 2048 * 1024.5))  # one prompt: all of it on one rank
    assert whole > 1.5 * spread
    tp = step_model(model, cluster, ReplicaShape(tp=8), weight_dtype="bf16", kv_bytes=2.0, max_tokens=4096, max_sampled=64)
    assert tp.gpu_s(**step) == tp.gpu_s(**step, rank_prefill=(2048, 2048 * 1024.5))  # TP attention: no ranks to wait for


def test_trtllm_gen_tile_follows_tokens_per_expert():
    import numpy as np

    from autotune.cost.expert_tiles import expert_row_share, padded_row_share, trtllm_gen_tile_rows

    tokens = np.array([1.0, 64.0, 256.0, 1024.0, 8192.0])
    # DeepSeek-R1's 256 experts, top 8: n k / E x 1.3 to a power of two in 8..64
    assert trtllm_gen_tile_rows(tokens, 256, 8).tolist() == [8, 8, 16, 64, 64]
    trtllm = expert_row_share(tokens, 256, 8, "nvfp4", "trtllm")
    cutlass = expert_row_share(tokens, 256, 8, "nvfp4")
    assert np.allclose(cutlass, padded_row_share(tokens, 256, 8, 128))
    assert trtllm[0] == 8.0 and cutlass[0] == 128.0  # one token: one tile of rows per expert it reaches
    assert np.all(trtllm <= cutlass)


def test_trtllm_profiled_moe_holds_every_attention_dp_rank_rows():
    # _util.py KvCacheCreator: dummy requests x tp_size under attention DP; the MoE all-gathers them unchunked
    from autotune.cost.serving_limits import trtllm_profile_peak_bytes

    model = resolve_model("qwen3-235b-a22b")
    one = trtllm_profile_peak_bytes(model, tp=8, ep=8, tokens=4096, attention_dp=False, weight_dtype="fp8")
    dp = trtllm_profile_peak_bytes(model, tp=8, ep=8, tokens=4096, attention_dp=True, weight_dtype="fp8")
    assert dp == 8 * one


def test_trtllm_profiled_moe_is_the_cutlass_workspace_at_the_rank_expert_width():
    from autotune.cost.serving_limits import trtllm_profile_peak_bytes

    model = resolve_model("llama4-maverick-17b-128e")  # H 5120, experts 8192 wide, top-1
    rows = 8 * 7680
    # moe_ep 8 (whole experts): inputs max(5120 x 1, 8192 x 1, 5120 x 2), outputs max(2 x 8192 x 2, 5120 x 2);
    # the gathered FP8 input and the BF16 output beside them
    expected = rows * ((10240 + 32768) + 5120 * 3)
    ep8 = trtllm_profile_peak_bytes(model, tp=8, ep=8, tokens=7680, attention_dp=True, weight_dtype="fp8")
    assert ep8 == expected
    tp8 = trtllm_profile_peak_bytes(model, tp=8, ep=1, tokens=7680, attention_dp=True, weight_dtype="fp8")
    assert tp8 < ep8  # expert TP splits the FC1 output eight ways


def test_trtllm_dense_models_keep_the_widest_tile():
    from autotune.cost.serving_limits import activation_bytes_per_token, trtllm_profile_peak_bytes

    model = resolve_model("llama3-70b")
    peak = trtllm_profile_peak_bytes(model, tp=8, ep=1, tokens=8192, attention_dp=False, weight_dtype="fp8")
    assert peak == activation_bytes_per_token(model, 8) * 8192
