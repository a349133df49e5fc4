"""Context parallelism for long sequences (autotune/cost/context_parallel.py): the ring, all-gather
and all-to-all (Ulysses) exchanges against hand computations, and activation memory at 32k-128k."""

import pytest

from autotune.cost.comm import GroupSpan, collective_time_s
from autotune.cost.context_parallel import cp_layer_comm_s
from autotune.errors import AutotuneError
from autotune.search.evaluate import evaluate
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime

CLUSTER = load_cluster("dgx-h100")
SPAN = GroupSpan(4, 1)


def _comm(kind, fwd, bwd, recompute=False):
    return cp_layer_comm_s(CLUSTER, kind, SPAN, kv_bytes=4e9, qkv_local_bytes=3e9, out_local_bytes=1e9,
                           fwd_attn_s=fwd, bwd_attn_s=bwd, recompute_forward=recompute)


def test_ring_hides_behind_attention_unless_the_link_is_slower():
    ring = collective_time_s("all_gather", 4e9, SPAN, CLUSTER)
    # hidden: only the attention's slowdown beside the exchange shows (18.9%, Lee et al. 2025; NVLink: share 1)
    assert _comm("ring", fwd=10.0, bwd=25.0) == pytest.approx(0.189 * 3 * ring)
    assert _comm("ring", fwd=0.0, bwd=0.0) == pytest.approx(3 * ring)  # K,V forward; K,V and grads backward
    fwd = ring / 2
    assert _comm("ring", fwd=fwd, bwd=0.0) == pytest.approx((ring - fwd) + 0.189 * fwd + 2 * ring)
    assert _comm("ring", fwd=0.0, bwd=0.0, recompute=True) == pytest.approx(4 * ring)


def test_all_gather_hides_only_behind_the_local_chunk():
    # PyTorch's context_parallel: K/V all-gathered (forward and backward) behind the local chunk's
    # kernel, dK/dV in fp32 one ring hop per step behind the next step's backward kernel, the
    # last hop exposed
    gather = collective_time_s("all_gather", 4e9, SPAN, CLUSTER)
    hop = collective_time_s("send_recv", 4e9 / 4 * 4.0 / 2.0, SPAN, CLUSTER)  # a quarter of K/V, fp32
    fwd, bwd = 4 * gather, 4 * max(gather, hop)  # the local chunk is a quarter of the attention (cp 4)
    assert _comm("all_gather", fwd=fwd, bwd=bwd) == pytest.approx(0.189 * (2 * gather + 3 * hop) + hop)
    assert _comm("all_gather", fwd=fwd / 2, bwd=0.0) == pytest.approx(gather / 2 + 0.189 * gather / 2
                                                                      + gather + 4 * hop)


def test_pytorch_ring_steps_merge_in_fp32():
    from autotune.cost.context_parallel import cp_step_overhead_s

    device = CLUSTER.device
    one = dict(local_out_elems=1e9, kv_per_out=0.5, act_bytes=2.0)
    assert cp_step_overhead_s(device, "all_gather", 1, recompute_forward=False, **one) == 0.0
    assert cp_step_overhead_s(device, "all_to_all", 8, recompute_forward=False, **one) == 0.0
    # PyTorch's merge (fp32 casts, sigmoid merge, cats) moves more than Megatron-Core's fused one
    torch_s = {cp: cp_step_overhead_s(device, "all_gather", cp, recompute_forward=False, **one) for cp in (2, 4, 8)}
    megatron_s = {cp: cp_step_overhead_s(device, "ring", cp, recompute_forward=False, **one) for cp in (2, 4, 8)}
    assert all(torch_s[cp] > megatron_s[cp] for cp in torch_s), (torch_s, megatron_s)
    # about linear in the steps: 8 steps cost more than twice 4 steps' extra
    assert torch_s[2] < torch_s[4] < torch_s[8] and torch_s[8] > 2 * (torch_s[4] - torch_s[2])
    # a forward recomputation repeats the forward merges, not the backward's
    again = cp_step_overhead_s(device, "all_gather", 8, recompute_forward=True, **one)
    assert torch_s[8] < again < 2 * torch_s[8]
    # MHA carries 4x the K/V of Llama 3's GQA (8 of 32 heads)
    assert cp_step_overhead_s(device, "all_gather", 8, recompute_forward=False, local_out_elems=1e9,
                              kv_per_out=2.0, act_bytes=2.0) > torch_s[8]


def test_ulysses_all_to_alls_are_on_the_critical_path():
    one = collective_time_s("all_to_all", 3e9, SPAN, CLUSTER) + collective_time_s("all_to_all", 1e9, SPAN, CLUSTER)
    assert _comm("all_to_all", fwd=100.0, bwd=100.0) == pytest.approx(2 * one)
    with pytest.raises(ValueError):
        _comm("bogus", 1.0, 1.0)


def _long(seq, cp, gpus=8, **kw):
    model = load_preset("llama3-8b").with_changes(max_seq_len=131072)  # Llama 3.1's context
    return evaluate(model, gpus, cluster="dgx-h100", cp=cp, dp=gpus // cp, global_batch=gpus // cp, seq_len=seq,
                    micro_batch=1, zero=3, recompute="full", dtype="bf16", runtime=Runtime(name="neutral"), **kw)


def test_long_context_variants_and_memory():
    # CP over two nodes at 32k: the ring still hides behind attention, the all-gather only
    # behind the local chunk; Ulysses pays its all-to-alls but runs no partial kernels to merge
    comm = {c: _long(32768, 16, gpus=16, cp_comm=c).breakdown["tp_cp_comm_s"]
            for c in ("ring", "all_gather", "all_to_all")}
    assert comm["ring"] < comm["all_gather"] and comm["all_to_all"] > 0, comm
    # activation memory grows linearly with the sequence (flash attention) and shrinks with cp
    mem = {seq: _long(seq, 4).memory_breakdown["activations_bytes"] for seq in (32768, 65536, 131072)}
    assert mem[65536] == pytest.approx(2 * mem[32768], rel=0.02)
    assert mem[131072] == pytest.approx(4 * mem[32768], rel=0.02)
    assert _long(131072, 8).memory_breakdown["activations_bytes"] == pytest.approx(mem[131072] / 2, rel=0.02)
    with pytest.raises(AutotuneError):
        _long(32768, 2, cp_comm="ulysses")


def _cp_comm_s(model, expanded: bool) -> float:
    from autotune.cost.evaluate import evaluate_plan
    from autotune.plan.builders import uniform_plan
    from autotune.spec.workload import TrainingWorkload

    work = TrainingWorkload(global_batch=1, seq_len=262144, dtype="bf16")
    plan = uniform_plan(num_layers=model.num_layers, gpus=8, tp=1, pp=1, dp=1, cp=8, micro_batch=1, global_batch=1,
                        recompute="full", zero=3, cp_comm="all_gather")
    runtime = Runtime(name="neutral", kv_heads_expanded=expanded)
    return evaluate_plan(model, work, CLUSTER, plan, runtime=runtime).stages[0].time_s["cp_comm_s"]


def test_repeated_kv_heads_travel_as_wide_as_the_query():
    # torchtitan's Llama repeats K and V to every query head before SDPA (repeat_kv), so PyTorch's
    # ring gathers, concatenates and accumulates K/V as wide as Q: Llama 3 8B's GQA (8 of 32 heads)
    # then exchanges what multi-head attention would
    gqa = load_preset("llama3-8b").with_changes(max_seq_len=262144)
    mha = gqa.with_changes(num_kv_heads=gqa.num_heads)
    grouped, expanded = _cp_comm_s(gqa, False), _cp_comm_s(gqa, True)
    assert expanded > 1.5 * grouped, (grouped, expanded)  # fp32 merges of the output stay as they were
    assert expanded == pytest.approx(_cp_comm_s(mha, False), rel=1e-9)
    assert _cp_comm_s(mha, True) == pytest.approx(_cp_comm_s(mha, False), rel=1e-9)  # nothing to repeat
    with pytest.raises(AutotuneError) as err:
        Runtime(name="neutral", kv_heads_expanded="yes")
    assert err.value.field == "runtime.kv_heads_expanded"
