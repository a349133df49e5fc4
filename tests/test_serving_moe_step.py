"""The MoE layer of a serving step as the engines lay it out: TP-split experts keep their routed rows
at full hidden size, DP attention gathers tokens for the experts (all-to-all only where TensorRT-LLM
has multi-node NVLink), and a KV head is never split across TP ranks."""

import pytest

from autotune.cost import serving_experts, serving_step
from autotune.cost.serving_eval import ServingDeployment, replica_step_model
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

_QWEN = "qwen3-235b-a22b"  # 128 experts of FFN 1536, top-8, 4 KV heads


def _step(shape: ReplicaShape, model: str = _QWEN, cluster: str = "dgx-h100", tokens: int = 4096):
    return step_model(resolve_model(model), load_cluster(cluster).for_gpus(shape.tp), shape, weight_dtype="fp8",
                      kv_bytes=1, max_tokens=tokens, max_sampled=8)


def test_tp_split_experts_move_every_routed_row_whole(monkeypatch):
    # each TP rank of an expert takes all its rows at full hidden size (only the intermediate width
    # splits), so at many tokens TP-split experts cost more than the same GPUs holding whole experts
    # under balanced routing (EP's busiest rank, cost/moe_skew.py, is test_moe_skew.py's)
    monkeypatch.setattr(serving_experts, "busiest_rank_skew", lambda model, ep, tokens, eplb: 1.0 + 0.0 * tokens)
    serving_step._step_model.cache_clear()  # the balanced steps must not be served from, or left in, the cache
    try:
        tp_split, ep_split = _step(ReplicaShape(tp=8)), _step(ReplicaShape(tp=8, ep=8))
    finally:
        serving_step._step_model.cache_clear()
    assert tp_split.linear_s[4096] > 1.2 * ep_split.linear_s[4096]
    # one token reads the same expert weights either way: the difference is in the rows
    assert tp_split.linear_s[1] == pytest.approx(ep_split.linear_s[1], rel=0.35)


def test_attention_dp_gathers_tokens_for_the_experts_unless_it_dispatches_all_to_all():
    # top-1 routing: a gather brings every rank's tokens, a dispatch only each token's one copy
    maverick = "llama4-maverick-17b-128e"
    gathered = _step(ReplicaShape(tp=8, ep=8, attention_dp=True), model=maverick)
    dispatched = _step(ReplicaShape(tp=8, ep=8, attention_dp=True, moe_alltoall=True), model=maverick)
    assert gathered.linear_s[4096] > dispatched.linear_s[4096]
    with pytest.raises(AutotuneError, match="moe_alltoall"):
        ReplicaShape(tp=8, ep=8, moe_alltoall=True)  # no dispatch without DP attention


def _deployment(cluster: str, ep: int, model: str = "llama4-maverick-17b-128e", runtime: str = "tensorrt-llm-1.0"):
    return ServingDeployment(model=resolve_model(model), cluster=load_cluster(cluster), runtime=load_runtime(runtime),
                             tp=ep, ep=ep, attention_dp=True, weight_dtype="fp8" if "h" in cluster else "nvfp4")


def test_trtllm_dispatches_all_to_all_only_on_multi_node_nvlink_with_ep_above_top_k():
    from autotune.cost.serving_eval import _moe_alltoall

    assert _moe_alltoall(_deployment("gb200-nvl72", 4))  # top-1 routing, ep 4, an NVL72 domain
    assert not _moe_alltoall(_deployment("dgx-b200", 4))  # one 8-GPU NVLink baseboard: allgather + reducescatter
    assert not _moe_alltoall(_deployment("gb200-nvl72", 4, model=_QWEN))  # ep 4 <= top-8
    assert not _moe_alltoall(_deployment("gb200-nvl72", 4, runtime="sglang"))
    assert replica_step_model(_deployment("dgx-b200", 4), max_tokens=64, max_sampled=8).linear_s[64] > 0


def test_a_kv_head_is_not_split_across_tp_ranks():
    # 4 KV heads: TP 8 keeps one whole head a rank, as TP 4 does
    tp4, tp8 = _step(ReplicaShape(tp=4), tokens=16), _step(ReplicaShape(tp=8), tokens=16)
    assert tp8.kv_bytes_per_token_per_gpu == pytest.approx(tp4.kv_bytes_per_token_per_gpu)
    assert tp8.decode_s_per_position == pytest.approx(tp4.decode_s_per_position, rel=0.01)
    tp2 = _step(ReplicaShape(tp=2), tokens=16)
    assert tp2.kv_bytes_per_token_per_gpu == pytest.approx(2 * tp4.kv_bytes_per_token_per_gpu)
