"""Gradients accumulated and reduced in 16 bits (Runtime.grad_reduce_in_fp32=False, as NVIDIA's
NeMo / Megatron-Bridge performance recipes run): half the gradient buffers and reduction bytes."""

import pytest

from autotune.calibrate.published import load_runs
from autotune.cost.memory import state_bytes_per_param
from autotune.cost.sharding import grad_comm_bytes
from autotune.outputs.export import export
from autotune.plan.builders import uniform_plan
from autotune.plan.io import PlanFile
from autotune.spec.presets import load_preset
from autotune.search.evaluate import evaluate
from autotune.spec.runtime import Runtime, load_runtime
from autotune.spec.workload import TrainingWorkload


def _workload(**kw) -> TrainingWorkload:
    return TrainingWorkload(global_batch=64, seq_len=4096, **kw)


def _runtime(**kw) -> Runtime:
    return Runtime(name="neutral", **kw)  # the old default workload's settings


def test_bf16_gradients_halve_the_buffers_and_the_reduction_bytes():
    assert state_bytes_per_param("bf16").gradients == 4.0
    assert state_bytes_per_param("bf16", grad_reduce_in_fp32=False).gradients == 2.0
    assert state_bytes_per_param("fp32", grad_reduce_in_fp32=False).gradients == 4.0  # fp32 training keeps fp32
    assert grad_comm_bytes(_runtime(), "bf16") == 4.0
    assert grad_comm_bytes(_runtime(grad_reduce_in_fp32=False), "bf16") == 2.0
    assert grad_comm_bytes(_runtime(grad_reduce_in_fp32=False), "fp8") == 2.0


def test_a_data_parallel_plan_holds_less_and_communicates_less():
    kw = dict(cluster="dgx-h100", dp=16, micro_batch=1, global_batch=64, seq_len=4096, zero=1)
    fp32 = evaluate("llama3-8b", 16, workload=_workload(), runtime=_runtime(), **kw)
    bf16 = evaluate("llama3-8b", 16, workload=_workload(), runtime=_runtime(grad_reduce_in_fp32=False), **kw)
    grads = fp32.memory_breakdown["gradients_bytes"], bf16.memory_breakdown["gradients_bytes"]
    assert grads[1] == pytest.approx(grads[0] / 2)
    assert bf16.breakdown["dp_comm_s"] < fp32.breakdown["dp_comm_s"]
    assert bf16.step_time_s <= fp32.step_time_s


@pytest.fixture
def runs(data_dir):
    return {run.run_id: run for run in load_runs(data_dir / "modern_runs.csv")[0]}


@pytest.mark.parametrize("run_id, fp32", [("nemo-mb-035", False),   # Megatron-Bridge 25.11 table
                                          ("nemo-longseq-01", False),  # NeMo 25.04 FP8
                                          ("nemo-2407-01", True),      # NeMo 24.07: not stated, Megatron's fp32
                                          ("tt-26", True)])           # torchtitan: FSDP2 reduces in fp32
def test_published_rows_take_their_recipe_setting(runs, run_id, fp32):
    assert runs[run_id].runtime.grad_reduce_in_fp32 is fp32


def test_megatron_export_names_the_bf16_reduction():
    """Megatron-LM reduces bf16 gradients in fp32 unless told (arguments.py: --grad-reduce-in-bf16)."""
    model = load_preset("llama3-8b")
    plan = uniform_plan(num_layers=model.num_layers, global_batch=64, gpus=8, micro_batch=1)
    megatron = load_runtime("megatron")
    texts = [export(PlanFile(plan=plan, model=model, workload=_workload(), cluster="dgx-h100",
                             runtime=megatron.with_changes(grad_reduce_in_fp32=fp32)), "megatron").text
             for fp32 in (True, False)]
    assert "--grad-reduce-in-bf16" not in texts[0] and "--grad-reduce-in-bf16" in texts[1]


def test_expert_weight_gradients_accumulate_into_bf16_main_grads_for_less_traffic():
    """TE's grouped linears accumulate each micro-batch's expert wgrad into main_grad: fp32 (8 bytes
    read and written per parameter) or, reducing in bf16, bf16 (4). Few rows per expert (short
    sequences) and large experts (Mixtral's 4096 x 14336) keep the wgrad memory-bound, where it shows."""
    kw = dict(cluster="dgx-h100", dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=256)
    work = dict(global_batch=64, seq_len=256)
    fp32 = evaluate("mixtral-8x7b", 8, workload=TrainingWorkload(**work), runtime=_runtime(), **kw)
    bf16 = evaluate("mixtral-8x7b", 8, workload=TrainingWorkload(**work), runtime=_runtime(grad_reduce_in_fp32=False),
                    **kw)
    assert bf16.breakdown["compute_s"] < fp32.breakdown["compute_s"]
    assert bf16.memory_breakdown["gradients_bytes"] == pytest.approx(fp32.memory_breakdown["gradients_bytes"] / 2)


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed"])
def test_frameworks_without_a_bf16_reduction_setting_refuse_it(fmt):
    from autotune.errors import AutotuneError

    model = load_preset("llama3-8b")
    plan = uniform_plan(num_layers=model.num_layers, global_batch=64, gpus=8, micro_batch=1, zero=3)
    runtime = load_runtime(fmt)
    assert runtime.grad_reduce_in_fp32
    export(PlanFile(plan=plan, model=model, workload=_workload(), cluster="dgx-h100", runtime=runtime), fmt)  # its default exports
    with pytest.raises(AutotuneError) as err:
        export(PlanFile(plan=plan, model=model, workload=_workload(), cluster="dgx-h100",
                        runtime=runtime.with_changes(grad_reduce_in_fp32=False)), fmt)
    assert err.value.field == "runtime.grad_reduce_in_fp32"
