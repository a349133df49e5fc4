"""Memory traffic of Megatron-Core's MoE layer the cost model prices (docs/moe.md "Measured traffic")."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cost import moe as moe_cost
from autotune.cost.moe import expert_layer_cost
from autotune.cost.stage import StageContext
from autotune.graph import model_tables
from autotune.plan.plan import StagePlan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload, TrainingWorkload
from moe_models import MIXTRAL_8X7B

CLUSTER = load_cluster("dgx-h100")
NEUTRAL = Runtime(name="neutral")  # the old default workload's settings
QWEN3_30B_SHAPE = MIXTRAL_8X7B.with_changes(hidden_size=2048, num_heads=32, num_kv_heads=4, num_experts=128,
                                            num_experts_per_token=8, expert_ffn_hidden_size=768)


def _stage(gpus=8, ep=8):
    return StagePlan(layers=(0, 32), has_embedding=True, has_head=True, num_gpus=gpus, tp=1, cp=1, dp=gpus,
                     sequence_parallel=False, ep=ep, etp=1)


def _ctx(dtype="bf16", model=MIXTRAL_8X7B, micro_batch=1, seq_len=4096, cluster=CLUSTER):
    w = TrainingWorkload(global_batch=256, seq_len=seq_len, dtype=dtype)
    return StageContext(tables=model_tables(model, seq_len, 2), workload=w, runtime=NEUTRAL, cluster=cluster.for_gpus(8),
                        micro_batch=micro_batch, num_microbatches=16)


def test_te_low_precision_experts_copy_their_rows_into_the_padded_layout():
    """TEGroupedMLP pads each expert's rows (FP8 16, MXFP8/NVFP4 32) and unpads the output: two
    memory-bound copies of the routed rows each way, in proportion to the rows; none in BF16, none for
    torchao's rowwise FP8 (torchtitan pads inside its permutation), none in inference."""
    small, large = _ctx("fp8", micro_batch=1), _ctx("fp8", micro_batch=4)
    fwd1, bwd1 = moe_cost._quantization_padding_s(small, 1e5)
    fwd4, bwd4 = moe_cost._quantization_padding_s(large, 4e5)
    assert fwd1 == bwd1 > 0.0
    latency = 2 * CLUSTER.device.memory_regression("stream").latency_s / CLUSTER.device.kernel_efficiency
    assert (fwd4 - latency) == pytest.approx(4 * (fwd1 - latency), rel=1e-6)
    for dtype in ("bf16", "fp8_rowwise"):
        assert moe_cost._quantization_padding_s(_ctx(dtype), 1e5) == (0.0, 0.0)
    for dtype in ("mxfp8", "nvfp4"):
        assert moe_cost._quantization_padding_s(_ctx(dtype), 1e5)[0] == pytest.approx(fwd1)
    serve = StageContext(tables=small.tables, workload=InferenceWorkload(batch=1, prompt_len=128, output_len=8),
                         runtime=NEUTRAL, cluster=small.cluster, micro_batch=1, num_microbatches=1)
    assert moe_cost._quantization_padding_s(serve, 1e5) == (0.0, 0.0)
    # in the layer: the FP8 experts' time grows by exactly those copies on the busiest rank
    ctx = _ctx("fp8")
    with_pad = expert_layer_cost(ctx, _stage())
    rows_busy = ctx.micro_batch * 4096 * 2 / 1 * with_pad.imbalance
    pad_fwd, pad_bwd = moe_cost._quantization_padding_s(ctx, rows_busy)
    original = moe_cost.TE_PADDED_DTYPES
    try:
        moe_cost.TE_PADDED_DTYPES = frozenset()
        without = expert_layer_cost(ctx, _stage())
    finally:
        moe_cost.TE_PADDED_DTYPES = original
    assert with_pad.fwd_s - without.fwd_s == pytest.approx(pad_fwd, rel=1e-6)
    assert with_pad.bwd_s - without.bwd_s == pytest.approx(pad_bwd, rel=1e-6)


def test_expert_weight_gradients_accumulate_in_fp32_main_grad():
    """With few rows per expert the grouped GEMMs' backward is bound by the weights' bytes: the dgrad
    reads the weights and the wgrad reads and writes the fp32 main_grad (8 bytes per parameter).
    With many rows the GEMMs are compute-bound and the accumulation does not show. (On B200: the H100's
    GEMM fit has a 12 us latency per expert group that keeps small groups compute-priced.)"""
    b200 = load_cluster("dgx-b200")
    few_rows = QWEN3_30B_SHAPE.with_changes(num_experts=512)  # 64 rows per expert at 4096 tokens
    original = moe_cost.MAIN_GRAD_BYTES_PER_PARAM
    try:
        priced = {}
        for main_grad_bytes in (2.0, original):
            moe_cost.MAIN_GRAD_BYTES_PER_PARAM = main_grad_bytes
            priced[main_grad_bytes] = (expert_layer_cost(_ctx(model=few_rows, cluster=b200), _stage(ep=1)),
                                       expert_layer_cost(_ctx(micro_batch=4, cluster=b200), _stage(ep=1)))
    finally:
        moe_cost.MAIN_GRAD_BYTES_PER_PARAM = original
    bf16_write, fp32_accumulate = priced[2.0], priced[original]
    assert fp32_accumulate[0].bwd_s > 1.3 * bf16_write[0].bwd_s
    assert fp32_accumulate[0].fwd_s == bf16_write[0].fwd_s
    assert fp32_accumulate[1].bwd_s == pytest.approx(bf16_write[1].bwd_s)  # compute-bound


def test_permutation_and_activation_bytes_follow_the_fused_kernels():
    """Backward of the fused permute/unpermute moves what their forward moved; the fused weighted
    SwiGLU's backward reads the output gradient and the saved input and writes the input gradient."""
    t = model_tables(QWEN3_30B_SHAPE, 256, 2)
    for table in (t.moe_layer, t.experts):
        for i, name in enumerate(table.names):
            if name in ("permute", "unpermute"):
                assert table.bwd_bytes_factor[i] == 1.0
            if name == "expert_act":
                assert table.bwd_bytes_factor[i] == pytest.approx(5.0 / 3.0)
                assert (table.in_bytes[i] + table.out_bytes[i]) / 256 == 8 * (2 * 768 + 768) * 2
            if name == "router_topk":  # dense probabilities and the bool map over all 128 experts
                assert table.out_bytes[i] / 256 == 128 * (2 + 1)


@pytest.mark.slow
def test_megatron_moe_layer_moves_what_the_graph_prices():
    """Run Megatron-Core's MoE layer (small shape) under profilers/moe_traffic.py and compare the bytes
    per token of the fused kernels' boundaries with the operators' priced bytes."""
    pytest.importorskip("megatron.core")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "profilers.moe_traffic", "--small"], cwd=root, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    result = json.loads(out.strip().splitlines()[-1])
    runs = result["runs"]
    shape = runs[0]["shape"]
    model = MIXTRAL_8X7B.with_changes(hidden_size=shape["hidden"], num_heads=4, num_kv_heads=2,
                                      num_experts=shape["experts"], num_experts_per_token=shape["topk"],
                                      expert_ffn_hidden_size=shape["ffn"])
    per_token = [{k: v / r["shape"]["tokens"] for k, v in r["boundary"].items()} for r in runs[:2]]
    for key in ("permute", "unpermute", "expert_act", "expert_act:bwd"):  # linear in tokens
        assert per_token[1][key] == pytest.approx(per_token[0][key], rel=0.02)
    t = model_tables(model, shape["tokens"], 2)
    ops = {n: (t.experts, i) for i, n in enumerate(t.experts.names)}
    ops.update({n: (t.moe_layer, i) for i, n in enumerate(t.moe_layer.names)})

    def priced(name, bwd=False):
        table, i = ops[name]
        fwd = (table.in_bytes[i] + table.out_bytes[i]) / shape["tokens"]
        return fwd * (table.bwd_bytes_factor[i] if bwd else 1.0)
    assert per_token[0]["permute"] == pytest.approx(priced("permute"), rel=0.05)
    assert per_token[0]["unpermute"] == pytest.approx(priced("unpermute"), rel=0.05)
    assert per_token[0]["expert_act"] == pytest.approx(priced("expert_act"), rel=0.05)
    assert per_token[0]["expert_act:bwd"] == pytest.approx(priced("expert_act", bwd=True), rel=0.05)
    assert per_token[0]["router_topk"] == pytest.approx(priced("router_topk"), rel=0.05)


def test_alltoall_dispatcher_sorts_by_local_expert_without_expert_parallelism_too():
    """Megatron-Core sorts the received rows into local-expert order whenever a rank holds more than
    one expert (measured at ep 1: two row copies each way); one local expert needs no sort."""
    sort_fwd, sort_bwd = moe_cost._sort_by_expert_s(_ctx(), _stage(ep=1), 4096 * 2, 8.0)
    assert sort_fwd == sort_bwd > 0.0
    assert moe_cost._sort_by_expert_s(_ctx(), _stage(ep=1), 4096 * 2, 1.0) == (0.0, 0.0)
    deepep = _ctx()
    deepep = StageContext(tables=deepep.tables, workload=deepep.workload,
                          runtime=NEUTRAL.with_changes(ep_dispatcher="deepep"), cluster=deepep.cluster, micro_batch=1, num_microbatches=16)
    assert moe_cost._sort_by_expert_s(deepep, _stage(ep=1), 4096 * 2, 8.0) == (0.0, 0.0)
