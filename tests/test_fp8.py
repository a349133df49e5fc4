"""Low-precision training (fp8, mxfp8, nvfp4) and the Blackwell presets."""

import subprocess
import sys

import pytest

from autotune.search.evaluate import evaluate
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload
from autotune.cost.compute import block_times
from autotune.cost.memory import state_bytes_per_param
from autotune.errors import AutotuneError
from autotune.graph.operators import Operator, _chain
from autotune.graph.table import OpTable
from autotune.spec.hardware import DeviceProfile, MemoryTier, Regression
from autotune.spec.hardware_data import load_cluster

NEUTRAL = Runtime(name="neutral")  # the old default workload's settings: each test's mechanism alone


def _device():
    return DeviceProfile(
        name="toy8", kind="gpu", peak_flops={"bf16": 100e12, "fp8": 200e12},
        tiers=(MemoryTier(name="hbm", capacity_bytes=80e9, bandwidth_bytes_per_s=2e12, latency_s=0),),
        compute={("gemm", "bf16"): Regression(latency_s=10e-6, seconds_per_unit=1 / 50e12),
                 ("gemm", "fp8"): Regression(latency_s=10e-6, seconds_per_unit=1 / 100e12)},
        memory=Regression(latency_s=2e-6, seconds_per_unit=1 / 1e12), reserved_bytes=1e9, provenance="test")


def test_fp8_gemm_uses_the_fp8_fit_plus_cast_kernels_by_hand():
    gemm = Operator(name="g", kind="gemm", flops=1e12, model_flops=1e12, act_in_bytes=1e9, act_out_bytes=1e9,
                    weight_bytes=0.5e9, params=0.25e9, saved_bytes=0, sharding="column", bwd_flops_factor=2,
                    bwd_kernels=2)
    table = OpTable.from_graph(_chain([gemm]))
    bf16 = block_times(table, _device(), "bf16", micro_batch=1, tp=1, cp=1, sequence_parallel=False)
    fp8 = block_times(table, _device(), "fp8", micro_batch=1, tp=1, cp=1, sequence_parallel=False)
    assert bf16.fwd_ops_s == pytest.approx([10e-6 + 1e12 / 50e12])
    # fp8 GEMM 10us + 1e12/100e12; casts: input and weight read in bf16, written in fp8 and
    # transposed: (1e9 + 0.5e9) x 2 bytes per bf16 byte... (2 + 2 x 1) / 2 = 2 -> 3e9 bytes, 2 kernels
    assert fp8.fwd_ops_s == pytest.approx([10e-6 + 1e12 / 100e12 + 2 * 2e-6 + 3e9 / 1e12])
    # backward: 2 GEMMs at the fp8 rate, the output gradient cast (1e9 x 2 bytes, 1 kernel)
    assert fp8.bwd_ops_s == pytest.approx([2 * 10e-6 + 2e12 / 100e12 + 2e-6 + 2e9 / 1e12])


def test_fp8_keeps_a_weight_copy_and_fp32_master_state():
    bf16, fp8, fp4 = (state_bytes_per_param(d) for d in ("bf16", "fp8", "nvfp4"))
    assert (fp8.weights, fp8.gradients, fp8.master, fp8.moments) == (3.0, 4.0, 4.0, 8.0)
    assert fp4.weights == 2.5 and bf16.weights == 2.0


def test_fp8_on_h100_is_faster_than_bf16_but_not_twice():
    kw = dict(cluster="dgx-h100", tp=8, global_batch=64, seq_len=8192, micro_batch=1, recompute="none", runtime=NEUTRAL)
    bf16 = evaluate("llama3-70b", 64, dtype="bf16", zero=1, **kw)
    fp8 = evaluate("llama3-70b", 64, dtype="fp8", zero=1, **kw)
    assert 1.15 < bf16.step_time_s / fp8.step_time_s < 2.0
    assert fp8.peak_memory_bytes_per_gpu > bf16.peak_memory_bytes_per_gpu  # the FP8 weight copies


def test_fp8_all_gather_halves_the_fsdp_gather():
    from dataclasses import replace

    from autotune.spec.resolve import training_workload
    from autotune.spec.presets import resolve_model
    model = resolve_model("llama3-8b")
    work = training_workload(model, global_batch=8, seq_len=4096, dtype="fp8")
    kw = dict(cluster="dgx-h100", zero=3, micro_batch=1, overlap_param_gather=False)
    gather = NEUTRAL.with_changes(fp8_all_gather=True)
    bf16_gather = evaluate(model, 8, workload=work, runtime=NEUTRAL, **kw).breakdown["dp_comm_s"]
    fp8_gather = evaluate(model, 8, workload=work, runtime=gather, **kw).breakdown["dp_comm_s"]
    assert fp8_gather < 0.8 * bf16_gather
    # the setting acts only under an FP8 recipe: a bf16 step gathers bf16 weights either way
    bf16 = replace(work, dtype="bf16")
    assert evaluate(model, 8, workload=bf16, runtime=gather, **kw).breakdown["dp_comm_s"] == pytest.approx(
        evaluate(model, 8, workload=bf16, runtime=NEUTRAL, **kw).breakdown["dp_comm_s"], rel=1e-12)


def test_fp8_weight_casts_once_per_step_where_the_runtime_reuses_them():

    from autotune.spec.resolve import training_workload
    from autotune.spec.presets import resolve_model
    model = resolve_model("llama3-8b")
    kw = dict(cluster="dgx-h100", tp=2, micro_batch=1, recompute="none")

    def step_s(dtype, global_batch, reuse):
        work = training_workload(model, global_batch=global_batch, seq_len=4096, dtype=dtype)
        return evaluate(model, 8, workload=work, runtime=NEUTRAL.with_changes(reuse_weight_casts=reuse), **kw).step_time_s

    # 16 micro-batches per step: TE's cached casts (Megatron) beat torchao's per-forward casts
    assert step_s("fp8", 64, True) < 0.995 * step_s("fp8", 64, False)
    # one micro-batch per step, or no casts at all: nothing to reuse
    assert step_s("fp8", 4, True) == pytest.approx(step_s("fp8", 4, False))
    assert step_s("bf16", 64, True) == pytest.approx(step_s("bf16", 64, False))
    with pytest.raises(AutotuneError, match="runtime.reuse_weight_casts") as err:
        NEUTRAL.with_changes(reuse_weight_casts="yes")
    assert err.value.field == "runtime.reuse_weight_casts"


def test_fp8_refused_on_a100_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "autotune", "evaluate", "--model", "llama3-8b", "--gpus", "8",
                           "--cluster", "dgx-a100-80gb", "--dtype", "fp8"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "fp8" in lines[0] and "A100" in lines[0], proc.stderr


def test_block_scaled_formats_need_blackwell():
    kw = dict(global_batch=8, seq_len=4096, runtime=NEUTRAL)
    with pytest.raises(AutotuneError, match="mxfp8"):
        evaluate("llama3-8b", 8, cluster="dgx-h100", dtype="mxfp8", **kw)
    b200 = evaluate("llama3-8b", 8, cluster="dgx-b200", dtype="mxfp8", **kw)
    nvfp4 = evaluate("llama3-8b", 8, cluster="dgx-b200", dtype="nvfp4", **kw)
    h100 = evaluate("llama3-8b", 8, cluster="dgx-h100", dtype="fp8", **kw)
    assert nvfp4.step_time_s < b200.step_time_s < h100.step_time_s


def test_blackwell_presets():
    nvl72 = load_cluster("gb200-nvl72")
    assert nvl72.gpus_per_node == 72 and nvl72.device.peak("fp8") == 5.0e15
    dgx = load_cluster("dgx-b200")
    assert dgx.gpus_per_node == 8 and dgx.intra_node.bandwidth_bytes_per_s == 680e9
    for cluster in (nvl72, dgx):
        assert all(fit.source for fit in cluster.device.compute.values())
    nvl72.check_gpus(72)
    with pytest.raises(AutotuneError):
        nvl72.check_gpus(100)


def test_low_precision_recipes_keep_the_output_projection_in_bf16():
    # Megatron-Core's output_layer is its own ColumnParallelLinear, outside Transformer Engine's FP8
    # modules, and torchtitan's float8 converter filters out "output": the LM head's GEMMs cost the
    # same under fp8 as under bf16, so growing the vocabulary adds the same time to both steps
    from autotune.spec.model import ModelSpec

    def step_s(vocab: int, dtype: str) -> float:
        model = ModelSpec(name=f"head-{vocab}", num_layers=2, hidden_size=2048, num_heads=16, num_kv_heads=16,
                          ffn_hidden_size=8192, ffn_activation="swiglu", vocab_size=vocab, max_seq_len=2048,
                          tied_embeddings=False, norm="rmsnorm", bias=False, position_embedding="rotary")
        return evaluate(model, 1, cluster="dgx-h100", dtype=dtype, micro_batch=8, global_batch=8,
                        seq_len=2048, runtime=NEUTRAL).step_time_s

    grown = {dtype: step_s(256000, dtype) - step_s(32000, dtype) for dtype in ("bf16", "fp8")}
    assert grown["fp8"] == pytest.approx(grown["bf16"], rel=0.05)
    assert step_s(32000, "fp8") < step_s(32000, "bf16")  # the layers' GEMMs do run in FP8


def test_fp8_tp_all_gathers_move_fp8_and_reduce_scatters_bf16():
    # torchao's Float8ColwiseParallel casts before its all-gather (and Float8RowwiseParallel the output
    # gradient before the backward one); reduce-scatters stay BF16: the exposed TP time drops by the
    # all-gathers' half, a quarter of the collectives' bytes
    from dataclasses import replace

    from autotune.spec.presets import resolve_model
    from autotune.spec.resolve import training_workload
    model = resolve_model("llama3-8b")
    work = training_workload(model, global_batch=8, seq_len=4096, dtype="fp8")
    kw = dict(cluster="dgx-h100", tp=8, micro_batch=1)
    gather = NEUTRAL.with_changes(fp8_tp_all_gather=True)
    bf16_tp = evaluate(model, 8, workload=work, runtime=NEUTRAL, **kw).breakdown["tp_cp_comm_s"]
    fp8_tp = evaluate(model, 8, workload=work, runtime=gather, **kw).breakdown["tp_cp_comm_s"]
    assert 0.55 * bf16_tp < fp8_tp < 0.9 * bf16_tp
    # the setting acts only under an FP8 recipe: a bf16 step gathers bf16 activations either way
    bf16 = replace(work, dtype="bf16")
    assert evaluate(model, 8, workload=bf16, runtime=gather, **kw).breakdown["tp_cp_comm_s"] == pytest.approx(
        evaluate(model, 8, workload=bf16, runtime=NEUTRAL, **kw).breakdown["tp_cp_comm_s"], rel=1e-12)


def test_transformer_engine_linears_keep_their_inputs_quantized_for_backward():
    """Under a TE recipe each low-precision linear saves its input in the GEMM format (1 byte in FP8,
    + 1/32 scales in MXFP8); the router stays BF16 and the attention output is kept twice (BF16 by the
    attention, quantized by the output projection). Standalone casts (torchao) save BF16 inputs."""
    from autotune.cost.compute import block_times, te_saved_input_factor
    from autotune.graph.table import model_tables
    from autotune.spec.presets import load_preset

    table = model_tables(load_preset("llama3-8b"), 8192, 2, "flash").layer
    factor = dict(zip(table.names, te_saved_input_factor(table, "mxfp8")))
    assert factor["qkv_proj"] == pytest.approx((1 + 1 / 32) / 2) and factor["ffn_down"] == factor["qkv_proj"]
    assert factor["out_proj"] == pytest.approx(1 + (1 + 1 / 32) / 2)
    assert factor["attention"] == 1.0 and factor["attn_norm"] == 1.0
    device = load_cluster("dgx-b200").device
    te = block_times(table, device, "mxfp8", 1, 1, 1, False, fp8_recipe="te_current")
    cast = block_times(table, device, "mxfp8", 1, 1, 1, False, fp8_recipe="cast")
    bf16 = block_times(table, device, "bf16", 1, 1, 1, False)
    assert float(cast.saved_bytes) == pytest.approx(float(bf16.saved_bytes))
    assert float(te.saved_bytes) < 0.9 * float(bf16.saved_bytes)
    moe = model_tables(load_preset("qwen3-30b-a3b"), 4096, 2, "flash").moe_layer
    assert dict(zip(moe.names, te_saved_input_factor(moe, "fp8")))["router"] == 1.0


def test_te_expert_linears_keep_their_inputs_quantized_too():
    """The routed experts' grouped linears save quantized inputs under a TE recipe: less activation memory
    than BF16 or standalone casts, the same step time."""
    kw = dict(cluster="dgx-b200", dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=4096)
    work = TrainingWorkload(global_batch=64, seq_len=4096, dtype="mxfp8")
    te = evaluate("qwen3-30b-a3b", 8, workload=work, runtime=NEUTRAL.with_changes(fp8_recipe="te_current"), **kw)
    cast = evaluate("qwen3-30b-a3b", 8, workload=work, runtime=NEUTRAL.with_changes(fp8_recipe="cast"), **kw)
    assert te.memory_breakdown["activations_bytes"] < 0.95 * cast.memory_breakdown["activations_bytes"]
    assert te.step_time_s == pytest.approx(cast.step_time_s, rel=0.05)
