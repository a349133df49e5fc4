"""Q, K and V as one fused GEMM or as three (torchtitan's wq, wk, wv): the same work in total,
priced as three kernels, narrow K/V GEMMs, FP8 casts per GEMM but the shared input's once."""

import numpy as np
import pytest

from autotune.cost.compute import block_times, op_amounts, op_coefficients
from autotune.cost.quantize import cast_s
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.graph import layer_graph, model_tables, operators
from autotune.graph.operators import QKV_SPLIT, qkv_projection_indices
from autotune.plan.builders import uniform_plan
from autotune.spec.hardware_data import load_device
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload

DEVICE = load_device("h100")
LLAMA_8B = load_preset("llama3-8b")
_SUMMED = ("flops", "model_flops", "params", "weight_bytes", "saved_bytes", "out_bytes")


def _layers(model, s=4096, e=2):
    return model_tables(model, s, e, "flash").layer, model_tables(model, s, e, "flash", qkv_fused=False).layer


def _ops(table):
    return {name: i for i, name in enumerate(table.names)}


@pytest.mark.parametrize("preset", ["llama3-8b", "gpt3-1.3b", "olmoe-1b-7b", "qwen3-30b-a3b"])
def test_three_gemms_carry_the_fused_gemms_work(preset):
    model = load_preset(preset)
    fused, split = _layers(model)
    i, j = _ops(fused), _ops(split)
    assert "qkv_proj" in i and not set(QKV_SPLIT) & set(i)
    assert "qkv_proj" not in j and [split.names[k] for k in qkv_projection_indices(split.names)] == list(QKV_SPLIT)
    for attr in _SUMMED:  # biases (GPT-3), QK norms (OLMoE, Qwen3) and GQA widths alike
        assert sum(getattr(split, attr)[j[n]] for n in QKV_SPLIT) == pytest.approx(getattr(fused, attr)[i["qkv_proj"]])
        assert getattr(split, attr).sum() == pytest.approx(getattr(fused, attr).sum())
    # the one input: read by each GEMM, saved once, its FP8 cast shared by K and V
    assert split.in_bytes[j["k_proj"]] == split.in_bytes[j["q_proj"]] == fused.in_bytes[i["qkv_proj"]]
    assert split.saved_bytes[j["k_proj"]] == split.saved_bytes[j["v_proj"]] == 0
    assert list(split.shares_input[[j[n] for n in QKV_SPLIT]]) == [False, True, True]
    assert not fused.shares_input.any()


def test_parameters_and_model_flops_are_unchanged():
    for model in (LLAMA_8B, load_preset("mixtral-8x7b")):
        fused = model_tables(model, 2048, 2, "flash")
        split = model_tables(model, 2048, 2, "flash", qkv_fused=False)
        assert split.num_params == fused.num_params == model.num_parameters()
        assert split.model_flops_per_sequence() == pytest.approx(fused.model_flops_per_sequence(), rel=1e-12)


def test_latent_attention_keeps_its_projections():
    m = load_preset("deepseek-v3").with_changes(num_experts=0, num_experts_per_token=0, expert_ffn_hidden_size=0,
                                                num_shared_experts=0, first_k_dense_layers=0)
    fused, split = _layers(m, 1024)
    assert fused.names == split.names and "qkv_proj" in split.names


def test_graph_has_the_three_projections_in_order():
    names = [op.name for op in operators(layer_graph(LLAMA_8B, 1024, 2, "flash", qkv_fused=False))]
    assert names[:5] == ["attn_norm", "q_proj", "k_proj", "v_proj", "attention"]


def test_narrow_kv_gemms_cost_more_than_their_flop_share():
    # Llama 3 8B at TP 8: K and V have 8 x 128 / 8 = 128 columns per GPU against Q's 512; at 8192
    # tokens a 4096 x 128 GEMM does about 128 FLOPs per byte, below the H100's ridge: memory-bound.
    fused, split = _layers(LLAMA_8B, 8192)
    j = _ops(split)
    bt = block_times(split, DEVICE, "bf16", 1, 8, 1, True)
    coef = op_coefficients(split, DEVICE, "bf16")
    flops = op_amounts(split, 1, 8, 1, True).flops
    qkv = [j[n] for n in QKV_SPLIT]
    time_share = bt.fwd_ops_s[..., j["k_proj"]] / bt.fwd_ops_s[..., qkv].sum(-1)
    assert time_share > split.flops[j["k_proj"]] / split.flops[qkv].sum() * 1.2
    k = j["k_proj"]
    assert bt.fwd_ops_s[..., k] > 1.2 * (coef.lat_c[k] + flops[..., k] * coef.spf[k])  # the memory roofline
    fused_bt = block_times(fused, DEVICE, "bf16", 1, 8, 1, True)
    gemms = fused_bt.fwd_ops_s[..., _ops(fused)["qkv_proj"]]
    assert bt.fwd_ops_s[..., qkv].sum(-1) > 1.3 * gemms
    assert bt.fwd_s > fused_bt.fwd_s and bt.bwd_s > fused_bt.bwd_s


@pytest.mark.parametrize("dtype", ["fp8", "fp8_rowwise"])
def test_fp8_casts_per_gemm_the_shared_input_once(dtype):
    fused, split = _layers(LLAMA_8B, 4096)
    cast = {}
    for name, table in (("fused", fused), ("split", split)):
        coef = op_coefficients(table, DEVICE, dtype)
        cast[name] = (cast_s(table, coef, dtype, op_amounts(table, 2, 4, 1, True)), coef)
    (fwd_f, bwd_f, _), coef_f = cast["fused"]
    (fwd_s, bwd_s, _), coef_s = cast["split"]
    i, j = _ops(fused)["qkv_proj"], _ops(split)
    qkv = [j[n] for n in QKV_SPLIT]
    lat = coef_f.lat_m[i]
    # the same bytes (input once, weights and output gradients split three ways), two more
    # weight-cast launches forward and two more output-gradient-cast launches backward
    assert fwd_s[..., qkv].sum(-1) == pytest.approx(fwd_f[..., i] + 2 * lat, rel=1e-9)
    assert bwd_s[..., qkv].sum(-1) == pytest.approx(bwd_f[..., i] + 2 * lat, rel=1e-9)
    assert fwd_s[..., j["k_proj"]] < fwd_s[..., j["q_proj"]] / 4  # no input cast of its own
    others = [k for k in range(len(split)) if k not in qkv]
    assert np.allclose(fwd_s[..., others], fwd_f[..., [k for k in range(len(fused)) if k != i]])


def test_backward_sums_the_three_input_gradients():
    # one fused kernel reads the three input gradients and writes their sum: 4 passes of the input
    split = _layers(LLAMA_8B, 4096)[1]
    j = _ops(split)
    bt = block_times(split, DEVICE, "bf16", 1, 1, 1, False)
    coef = op_coefficients(split, DEVICE, "bf16")
    expected = coef.lat_m[j["k_proj"]] + 4 * split.in_bytes[j["k_proj"]] * coef.spb[j["k_proj"]]
    shared = [j["k_proj"], j["v_proj"]]
    plain = np.maximum(2 * coef.lat_c[shared] + 2 * split.flops[shared] * coef.spf[shared],
                       2 * coef.lat_m[shared] + (2 * (split.in_bytes + split.out_bytes)[shared]
                                                 + 2 * split.weight_bytes[shared]) * coef.spb[shared])
    assert bt.bwd_ops_s[..., shared].sum(-1) - plain.sum() == pytest.approx(expected, rel=1e-9)


def test_runtime_field_reaches_the_cost_model():
    cluster = resolve_cluster("dgx-h100").for_gpus(8)
    plan = uniform_plan(num_layers=LLAMA_8B.num_layers, gpus=8, tp=8, dp=1, micro_batch=1, global_batch=8,
                        sequence_parallel=True, overlap_tp_comm=True)
    times = {}
    for fused in (True, False):
        work = TrainingWorkload(global_batch=8, seq_len=8192, dtype="fp8_rowwise")
        est = evaluate_plan(LLAMA_8B, work, cluster, plan, runtime=Runtime(name="neutral", qkv_fused=fused))
        times[fused] = (est.step_time_s, est.model_flops_per_step)
    assert times[False][0] > times[True][0]
    assert times[False][1] == times[True][1]  # model FLOPs (MFU) are the same work
    with pytest.raises(AutotuneError, match="runtime.qkv_fused") as err:
        Runtime(name="neutral", qkv_fused="no")
    assert err.value.field == "runtime.qkv_fused"


def test_torchtitan_rows_run_three_gemms(data_dir):
    import csv

    from autotune.calibrate.modern import FRAMEWORK_DEFAULTS, modern_run_from_row

    rows = {r["id"]: r for r in csv.DictReader(open(data_dir / "modern_runs.csv"))}
    assert modern_run_from_row(rows["tt-29"])[2].qkv_fused is False
    assert modern_run_from_row(rows["llmf-004"])[2].qkv_fused is True
    assert any(setting == "attention projections" for setting, _, _ in FRAMEWORK_DEFAULTS["torchtitan"])


@pytest.mark.slow
def test_inductor_casts_the_shared_input_once():
    # Evidence for ``shares_input``: three linears, each casting its operands as torchao's row-wise
    # float8 does; after torch.compile's post-grad passes the input's amax is taken once per axis,
    # the weights' and output gradients' per GEMM.
    torch = pytest.importorskip("torch")
    from torch._inductor import config

    def cast(x, dim):
        scale = 448.0 / x.abs().amax(dim=dim, keepdim=True).float().clamp(min=1e-12)
        return (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale

    class Float8MM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            (xq, sx), (wq, sw) = cast(x, -1), cast(w, 0)
            return ((xq.float() / sx) @ (wq.float() / sw)).to(torch.bfloat16)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            (gq, sg), (wq, sw) = cast(g, -1), cast(w, 1)
            (xq, sx), (gq2, sg2) = cast(x, 0), cast(g, 0)
            return (((gq.float() / sg) @ (wq.float() / sw).t()).to(torch.bfloat16),
                    ((xq.float() / sx).t() @ (gq2.float() / sg2)).to(torch.bfloat16))

    amax_inputs = []

    def record(graph):
        amax_inputs.extend(tuple(n.args[0].meta["val"].shape) for n in graph.nodes
                           if n.target == torch.ops.aten.amax.default)

    x = torch.randn(64, 128, dtype=torch.bfloat16, requires_grad=True)
    weights = [torch.randn(128, n, dtype=torch.bfloat16, requires_grad=True) for n in (64, 16, 16)]
    step = torch.compile(lambda x, *ws: [Float8MM.apply(x, w) for w in ws])
    try:
        with config.patch(post_grad_custom_post_pass=record):
            sum(out.float().sum() for out in step(x, *weights)).backward()
    finally:
        torch._dynamo.reset()  # drop the compiled graph and its fake tensors (other tests walk the live tensors)
    assert amax_inputs.count((64, 128)) == 2  # the input, once per scaling axis (6 before compiling)
    assert amax_inputs.count((64, 16)) == 4  # each narrow GEMM's output gradient, twice
