"""The attention-DP MoE exchange in serving steps from NVIDIA's aiconfigurator nccl-tests sweeps
(autotune/data/nccl_collectives.toml, cost/serving_nccl.py serving_nccl_s): all-gather before the experts and
reduce-scatter after at the measured time inside one node, comm.py's formula outside the tables; TensorRT-LLM
gathers its quantized MoE input (cost/serving_collectives.py adp_gather_bytes); training keeps the formula."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.serving_collectives import adp_gather_bytes, moe_comm_dtype, moe_exchange_s
from autotune.cost.serving_nccl import MEASURED_OPS, nccl_tables, serving_nccl_s
from autotune.cost.serving_step import ReplicaShape
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import cluster_names, load_cluster
from autotune.spec.presets import resolve_model

PRESETS = {"dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"}


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all"])
def test_every_priced_gpu_has_a_table_citing_its_source(op):
    tables = nccl_tables(op)
    assert {name for name, _ in tables} >= PRESETS
    for (name, gpus), table in tables.items():
        assert name in cluster_names() and gpus <= load_cluster(name).gpus_per_node
        assert table.op == op and "aiconfigurator @095f58a5" in table.source and "nccl_perf.parquet" in table.source
        # microseconds at small sizes, rising with the message
        assert 3e-6 < table.seconds[0] < 40e-6 and table.seconds[-1] > 20 * table.seconds[0]


def test_an_unknown_op_is_refused():
    assert "all_reduce" in MEASURED_OPS
    with pytest.raises(AutotuneError):
        nccl_tables("broadcast")


def test_measured_sizes_come_back_and_between_them_a_straight_line():
    cluster, span = load_cluster("dgx-h200"), GroupSpan(8, 1)
    table = nccl_tables("all_gather")[("dgx-h200", 8)]
    grid = np.array(table.nbytes[5:10])
    np.testing.assert_allclose(serving_nccl_s("all_gather", grid, span, cluster), table.seconds[5:10])
    middle = (grid[:-1] + grid[1:]) / 2
    np.testing.assert_allclose(serving_nccl_s("all_gather", middle, span, cluster),
                               (np.array(table.seconds[5:9]) + table.seconds[6:10]) / 2)


def test_outside_the_tables_the_formula():
    h200 = load_cluster("dgx-h200")
    table = nccl_tables("reduce_scatter")[("dgx-h200", 8)]
    for act, span, cluster in [(np.array([table.nbytes[0] / 2, table.nbytes[-1] * 2]), GroupSpan(8, 1), h200),
                               (np.array([1e6]), GroupSpan(8, 2), h200),  # across nodes
                               (np.array([1e6]), GroupSpan(6, 1), h200),  # a group size not swept
                               (np.array([1e6]), GroupSpan(8, 1), load_cluster("gb200-nvl72")),  # swept to 4 GPUs
                               (np.array([1e6]), GroupSpan(8, 1), load_cluster("dgx-a100-80gb"))]:  # no table
        np.testing.assert_array_equal(serving_nccl_s("reduce_scatter", act, span, cluster),
                                      collective_time_s("reduce_scatter", act, span, cluster))


def test_the_gather_path_takes_the_measured_collectives():
    """1,024 DeepSeek tokens a step on 8 H200 under DP attention: the measured all-gather and reduce-scatter of
    14.7 MB (~61 and ~63 us) against ~45.5 us each by the formula."""
    model, cluster, span = resolve_model("deepseek-v3"), load_cluster("dgx-h200"), GroupSpan(8, 1)
    tokens = np.array([1024.0])
    act = tokens * model.hidden_size * 2
    got = moe_exchange_s(model, cluster, ReplicaShape(tp=8, ep=8, attention_dp=True), span, tokens)
    np.testing.assert_allclose(got, serving_nccl_s("all_gather", act, span, cluster)
                               + serving_nccl_s("reduce_scatter", act, span, cluster))
    assert 110e-6 < got[0] < 140e-6
    assert got[0] > 1.2 * 2 * collective_time_s("all_gather", act, span, cluster)[0]
    assert moe_exchange_s(model, cluster, ReplicaShape(tp=8, ep=8), span, tokens)[0] == 0.0


def test_tensorrt_llm_gathers_its_quantized_input_and_routing():
    ds, qwen = resolve_model("deepseek-v3"), resolve_model("qwen3-235b-a22b")
    assert ds.fp8_block_scaled and not qwen.fp8_block_scaled
    assert moe_comm_dtype(ds, "tensorrt-llm", "nvfp4") == moe_comm_dtype(ds, "mlperf-nvidia", "nvfp4") == "nvfp4"
    assert moe_comm_dtype(ds, "tensorrt-llm", "fp8") == "bf16"  # block scales: the BF16 rows go out
    assert moe_comm_dtype(qwen, "tensorrt-llm", "fp8") == "fp8"
    assert moe_comm_dtype(ds, "vllm", "nvfp4") == moe_comm_dtype(ds, "sglang", "fp8") == ""
    routing = ds.num_experts_per_token * 8  # int32 expert ids + fp32 weights a token
    assert adp_gather_bytes(ds, "nvfp4") == pytest.approx(ds.hidden_size * (0.5 + 1 / 16) + routing)
    assert adp_gather_bytes(qwen, "fp8") == qwen.hidden_size + qwen.num_experts_per_token * 8
    assert adp_gather_bytes(ds, "bf16") == ds.hidden_size * 2 + routing
    assert adp_gather_bytes(ds, "") == ds.hidden_size * 2  # vLLM's and SGLang's BF16 hidden state
    # fewer bytes gathered, a shorter exchange; the reduce-scatter of the BF16 output is the same
    cluster, span, tokens = load_cluster("dgx-b200"), GroupSpan(8, 1), np.array([64.0, 1024.0, 8192.0])
    bf16 = moe_exchange_s(ds, cluster, ReplicaShape(tp=8, ep=8, attention_dp=True), span, tokens)
    fp4 = moe_exchange_s(ds, cluster, ReplicaShape(tp=8, ep=8, attention_dp=True, moe_comm_dtype="nvfp4"),
                         span, tokens)
    assert np.all(fp4 < bf16)
    rs = serving_nccl_s("reduce_scatter", tokens * ds.hidden_size * 2, span, cluster)
    assert np.all(fp4 > rs)


def test_tensorrt_llm_all_to_all_on_gb200_from_its_measured_sweep():
    """DeepSeek on GB200 NVL72 at EP32 (the MNNVL all-to-all): the sweep's dispatch + combine a rank's tokens;
    the formula outside its token range, for EP sizes not swept and for other MoE shapes."""
    from autotune.cost.mesh import group_spans
    from autotune.cost.serving_a2a import trtllm_alltoall_tables

    ds, cluster = resolve_model("deepseek-v3"), load_cluster("gb200-nvl72")
    table = trtllm_alltoall_tables()[("gb200-nvl72", "nvfp4", 32)]
    assert "aiconfigurator @095f58a5" in table.source and "NVLinkTwoSided" in table.source
    span = group_spans("tp-cp-dp", 32, 1, 1, cluster.gpus_per_node)["tp"]
    shape = ReplicaShape(tp=32, ep=32, attention_dp=True, moe_alltoall=True, moe_comm_dtype="nvfp4")
    per_rank = np.array(table.tokens[8:12])
    got = moe_exchange_s(ds, cluster, shape, span, per_rank * 32)
    np.testing.assert_allclose(got, np.array(table.dispatch_seconds[8:12]) + table.combine_seconds[8:12])
    bf16 = moe_exchange_s(ds, cluster, ReplicaShape(tp=32, ep=32, attention_dp=True, moe_alltoall=True,
                                                    moe_comm_dtype="bf16"), span, per_rank * 32)
    assert np.all(bf16 > got)  # FP4 rows dispatch fewer bytes
    sent = lambda m, n: n / 32 * m.num_experts_per_token * m.hidden_size * 2  # noqa: E731
    outside = np.array([table.tokens[-1] * 2 * 32])
    np.testing.assert_allclose(moe_exchange_s(ds, cluster, shape, span, outside),
                               2 * collective_time_s("all_to_all", sent(ds, outside), span, cluster))
    qwen = resolve_model("qwen3-235b-a22b")  # hidden 4096: not the swept shape
    tokens = np.array([32.0 * 64])
    np.testing.assert_allclose(moe_exchange_s(qwen, cluster, shape, span, tokens),
                               2 * collective_time_s("all_to_all", sent(qwen, tokens), span, cluster))
    # a lone slow point at one token is read as the time at more tokens
    ep16 = trtllm_alltoall_tables()[("gb200-nvl72", "bf16", 16)]
    assert ep16.time_s(np.array([1.0]))[0] <= ep16.time_s(np.array([8.0]))[0]


def test_training_collectives_keep_the_formula():
    """comm.py prices training; the tables are read by the serving path only."""
    cluster = load_cluster("dgx-h200")
    assert not any(op in ("all_gather", "reduce_scatter", "all_to_all") for op, _ in cluster.intra_node.collectives)


def test_sglang_gathers_by_all_reduce_before_its_max_len_mode_and_in_prompt_steps_after():
    """SGLang's SUM_LEN exchange: two all-reduces of every rank's rows (its own kernel below 8 MiB, NCCL above);
    the 0.4 line always, later releases in steps with prompt tokens only (decode batches: MAX_LEN's gather)."""
    from autotune.cost.serving_collectives import prefill_exchange_extra_s, tp_all_reduce_s

    model, cluster, span = resolve_model("deepseek-v3"), load_cluster("dgx-h200"), GroupSpan(8, 1)
    tokens = np.array([0.0, 64.0, 2048.0, 16384.0])
    act = tokens * model.hidden_size * 2
    always = ReplicaShape(tp=8, ep=8, attention_dp=True, adp_all_reduce="always")
    np.testing.assert_allclose(moe_exchange_s(model, cluster, always, span, tokens),
                               2 * tp_all_reduce_s(act, tokens, span, cluster, "custom_ar"))
    assert prefill_exchange_extra_s(model, cluster, always, span, tokens) is None
    by_batch = ReplicaShape(tp=8, ep=8, attention_dp=True, adp_all_reduce="prefill")
    gather = ReplicaShape(tp=8, ep=8, attention_dp=True)
    np.testing.assert_array_equal(moe_exchange_s(model, cluster, by_batch, span, tokens),
                                  moe_exchange_s(model, cluster, gather, span, tokens))
    extra = prefill_exchange_extra_s(model, cluster, by_batch, span, tokens)
    np.testing.assert_allclose(extra[1:], (moe_exchange_s(model, cluster, always, span, tokens)
                                           - moe_exchange_s(model, cluster, gather, span, tokens))[1:])
    assert extra[-1] > 0  # a large prompt batch: an all-reduce moves twice a gather's bytes
    with pytest.raises(AutotuneError):
        ReplicaShape(tp=8, ep=8, attention_dp=True, adp_all_reduce="sometimes")


def test_the_engines_exchange_by_preset():
    from autotune.cost.serving_eval import _adp_all_reduce
    from autotune.spec.runtime import load_runtime

    class Dep:  # the two fields _adp_all_reduce reads
        def __init__(self, runtime, attention_dp=True):
            self.runtime, self.attention_dp = load_runtime(runtime), attention_dp

    assert _adp_all_reduce(Dep("sglang-0.4")) == "always"
    assert _adp_all_reduce(Dep("sglang")) == "prefill"
    assert _adp_all_reduce(Dep("sglang", attention_dp=False)) == ""
    assert _adp_all_reduce(Dep("tensorrt-llm-1.0")) == _adp_all_reduce(Dep("vllm")) == ""


def test_a_step_with_prompts_pays_the_sum_len_exchange_and_a_decode_step_does_not():
    from autotune.cost.serving_step import step_model

    model, cluster = resolve_model("deepseek-v3"), load_cluster("dgx-h200").for_gpus(8)
    kw = dict(weight_dtype="fp8", kv_bytes=1.0, max_tokens=8192, max_sampled=512)
    gather = step_model(model, cluster, ReplicaShape(tp=8, ep=8, attention_dp=True), **kw)
    by_batch = step_model(model, cluster, ReplicaShape(tp=8, ep=8, attention_dp=True, adp_all_reduce="prefill"), **kw)
    assert gather.prefill_exchange_s is None and by_batch.prefill_exchange_s is not None
    decode = dict(decodes=256, context=256 * 1000.0, prefill_tokens=0, pairs=0.0, sampled=256)
    assert by_batch.gpu_s(**decode) == gather.gpu_s(**decode)
    prompt = dict(decodes=0, context=0.0, prefill_tokens=8192, pairs=8192 * 4096.0, sampled=8)
    assert by_batch.gpu_s(**prompt) - gather.gpu_s(**prompt) == pytest.approx(by_batch.prefill_exchange_s[8192])
    assert by_batch.prefill_exchange_s[8192] > 0
