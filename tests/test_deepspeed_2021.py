"""DeepSpeed ZeRO-3 of 2021 (the deepspeed-2021 runtime, cost/zero3_calls.py) and NCCL 2.8's ring model
(cost/comm.py nccl_2_8_ring_s): hand computations from the sources' constants and behaviour."""

import pytest

from autotune.cost.comm import GroupSpan, nccl_2_8_ring_s
from autotune.cost.sharding import LayerTraffic
from autotune.cost.zero3_calls import GatherCalls, TensorTraffic, gather_calls, layer_weight_elements
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime, load_runtime

DS_2021 = load_runtime("deepspeed-2021")


def deepspeed_2021_calls(model: ModelSpec, tp: int, qkv_fused: bool, copy_kernel_s: float = 0.0) -> GatherCalls | None:
    return gather_calls(DS_2021.with_changes(qkv_fused=qkv_fused), model, tp, copy_kernel_s)


def _gpt(hidden: int, heads: int = 16, ffn_activation: str = "gelu") -> ModelSpec:
    return ModelSpec(name="gpt", num_layers=4, hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                     ffn_hidden_size=4 * hidden, ffn_activation=ffn_activation, vocab_size=51200, max_seq_len=2048,
                     tied_embeddings=True)


def test_ring_latency_by_hand_at_1536_ranks():
    # 192 DGX A100 nodes: 1535 steps, 191 of them over the network. LL128 (tuning.cc v2.8.4):
    # 10 + 1344 x 1.9 + 191 x 4.0 us; a 100 kB call runs LL: 3.6 + 1344 x 0.47 x 1.8 + 191 x 2.7 us
    cluster, span = load_cluster("dgx-a100-80gb"), GroupSpan(8, 192)
    latency, transfer = nccl_2_8_ring_s("all_gather", 1.2e9, span, cluster)
    assert latency == pytest.approx((10 + 1344 * 1.9 + 191 * 4.0) * 1e-6)
    assert transfer == pytest.approx(1535 / 1536 * 1.2e9 / (8 * 18.3e9))  # LL128 capped at 18.3 GB/s a channel
    small, _ = nccl_2_8_ring_s("all_gather", 1e5, span, cluster)
    assert small == pytest.approx((3.6 + 1344 * 0.47 * 1.8 + 191 * 2.7) * 1e-6)


def test_ring_latency_grows_with_ranks_and_protocol_follows_size():
    cluster = load_cluster("dgx-a100-80gb")
    latency = [nccl_2_8_ring_s("all_gather", 3e8, GroupSpan(8, nodes), cluster)[0] for nodes in (48, 96, 192)]
    assert latency[1] / latency[0] == pytest.approx(2.0, rel=0.05)
    assert latency[2] / latency[1] == pytest.approx(2.0, rel=0.05)
    # on 8 GPUs of one node a gigabyte goes by Simple (full NVLink bandwidth), 100 kB by LL
    big, big_transfer = nccl_2_8_ring_s("reduce_scatter", 1e9, GroupSpan(8, 1), cluster)
    assert big == pytest.approx((8.4 + 7 * 3.4) * 1e-6)
    assert big_transfer == pytest.approx(7 / 8 * 1e9 / 230e9)
    assert nccl_2_8_ring_s("all_gather", 1e5, GroupSpan(8, 1), cluster)[0] == pytest.approx((3.6 + 7 * 0.47) * 1e-6)
    assert nccl_2_8_ring_s("all_gather", 1e9, GroupSpan(1, 1), cluster) == (0.0, 0.0)
    with pytest.raises(ValueError):
        nccl_2_8_ring_s("all_reduce", 1e9, GroupSpan(8, 2), cluster)


def test_gpt3_175b_layer_gathers_and_regathers():
    # 12288 wide: QKV 3h^2, attention output h^2, FFN 4h^2 each, all above 1e5 elements
    h = 12288
    model = _gpt(h, heads=96)
    assert layer_weight_elements(model, 1, True) == [3 * h * h, h * h, 4 * h * h, 4 * h * h]
    assert DS_2021.qkv_fused  # Megatron-DeepSpeed's fused QKV
    calls = gather_calls(DS_2021, model, 1, 2.6e-6)
    assert calls.shares == pytest.approx((0.25, 1 / 12, 1 / 3, 1 / 3))
    # reuse distances 2 x (9, 8, 4, 0) h^2 = 2.7e9, 2.4e9, 1.2e9, 0 against 1e9: three re-gathered
    assert calls.regathered == (0, 1, 2)
    assert calls.per_rank_copies and calls.nccl_tuning == "2.8" and calls.gather_host_s_per_rank == 2e-6
    assert calls.copy_kernel_s == 2.6e-6


def test_narrow_layers_keep_their_weights_and_small_tensors_persist():
    # BERT-5B's 2560-wide layer (12 h^2 = 7.9e7 elements) lies within max_reuse_distance: kept
    wide = deepspeed_2021_calls(_gpt(2560, heads=40), 1, False)
    assert len(wide.shares) == 6 and wide.regathered == ()
    # 256 wide: h^2 = 65536 < 1e5 persists (the attention output, and Q, K, V when separate)
    narrow = _gpt(256, heads=4, ffn_activation="swiglu")
    assert len(deepspeed_2021_calls(narrow, 1, True).shares) == 4  # QKV, gate, up, down
    assert len(deepspeed_2021_calls(narrow, 1, False).shares) == 3
    assert len(deepspeed_2021_calls(narrow, 2, True).shares) == 3  # QKV's 98304 per GPU persists
    assert deepspeed_2021_calls(_gpt(64, heads=4), 1, True) is None  # everything persists


@pytest.mark.parametrize("field, value", [
    ("shares", (0.5, 0.4)), ("shares", (1.5, -0.5)), ("regathered", (2,)), ("regathered", (0, 0)),
])
def test_gather_calls_reject_bad_shares(field, value):
    changes = {"shares": (0.5, 0.5)} if field == "regathered" else {}
    with pytest.raises(AutotuneError) as err:
        GatherCalls(**{**changes, field: value})
    assert err.value.field == {"shares": "gather_tensor_shares", "regathered": "regathered_tensors"}[field]


@pytest.mark.parametrize("field, value", [
    ("gather_host_s_per_rank", -1e-6), ("per_rank_copies", "yes"), ("nccl_tuning", "2.4"),
    ("zero3_persistence_elements", -1), ("zero3_persistence_elements", 1.5), ("zero3_max_reuse_elements", -1.0),
])
def test_runtime_rejects_bad_call_settings(field, value):
    with pytest.raises(AutotuneError) as err:
        Runtime(name="neutral", **{field: value})
    assert err.value.field == f"runtime.{field}"


def test_each_gather_hides_behind_one_module_by_hand():
    # two tensors of equal share; gathers 3 s each, reduce-scatters 1 s, host 0.5 s per gather;
    # layer forward 4 s (2 s per module), backward 8 s (4 per module), no contention (share 0)
    calls = GatherCalls(shares=(0.5, 0.5), regathered=(0,))
    t = TensorTraffic(calls=calls, gather_s=(3.0, 3.0), reduce_s=(1.0, 1.0), host_s=0.5, recompute_s=4.0)
    layer = LayerTraffic(gather_s=6.0, reduce_s=2.0, fwd_s=4.0, bwd_s=12.0, share=0.0, tensors=t)
    # without recomputation (the whole 12 s is backward, 6 s a module): forward 2 x (3 - 2); the
    # backward gathers both, each behind a module's 6 s: 0; + 2 x 1 reduce + 4 gathers x 0.5 host
    assert t.exposed_s(True, False, layer) == pytest.approx(2.0 + 0.0 + 2.0 + 2.0)
    # full recompute (4 s inside the 12 s): forward 2, recompute 0 + 1 (the first behind the
    # backward's 4 s), the re-gathered first tensor behind the second's backward (4 s): 0;
    # 5 gathers x 0.5 host + 2 reduces
    assert t.exposed_s(True, True, layer) == pytest.approx(2.0 + 1.0 + 0.0 + 2.5 + 2.0)
    # nothing hidden: 2 + 2 + 1 gathers of 3 s, host and reduces
    assert t.exposed_s(False, True, layer) == pytest.approx(15.0 + 2.5 + 2.0)


def test_arrays_of_stage_sizes_price_as_each_size_alone():
    # the search prices many stage sizes at once (arrays); each element must equal its scalar price
    import numpy as np

    from autotune.cost.sharding import shard_groups
    from autotune.cost.zero3_calls import tensor_layer_traffic
    from autotune.plan.plan import StagePlan

    cluster = load_cluster("dgx-a100-80gb")
    sizes = np.array([1e5, 3e8, 1.8e9])
    span = GroupSpan(8, 48)
    lat, tr = nccl_2_8_ring_s("all_gather", sizes, span, cluster)
    for i, size in enumerate(sizes):
        assert (lat[i], tr[i]) == pytest.approx(nccl_2_8_ring_s("all_gather", float(size), span, cluster))
    stage = StagePlan(layers=(0, 4), has_embedding=True, has_head=True, num_gpus=384, tp=1, cp=1, dp=384, zero=3)
    groups = shard_groups(stage, span)
    calls = GatherCalls(shares=(0.25, 1 / 12, 1 / 3, 1 / 3), regathered=(0, 1, 2), per_rank_copies=True,
                        gather_host_s_per_rank=2e-6, nccl_tuning="2.8", copy_kernel_s=2.6e-6)
    fwd, bwd, rec = np.array([0.05, 0.15]), np.array([0.15, 0.45]), np.array([0.05, 0.15])
    params = np.array([1.8e9, 1.8e9])
    both = tensor_layer_traffic(cluster, groups, params, 2.0, 2.0, fwd, bwd, rec, 20.8e9, calls)
    for i in range(2):
        one = tensor_layer_traffic(cluster, groups, float(params[i]), 2.0, 2.0, float(fwd[i]), float(bwd[i]),
                                   float(rec[i]), 20.8e9, calls)
        for overlap in (True, False):
            assert both.tensors.exposed_s(overlap, True, both)[i] == pytest.approx(one.tensors.exposed_s(overlap, True, one))
