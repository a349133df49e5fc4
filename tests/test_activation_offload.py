"""Megatron-Core's CPU offloading of the first N layers' activations (StagePlan.activation_offload_layers,
cost/offload.py layer_offload): memory, time, validation, plan files, exports and the NeMo recipe rows."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest

from autotune.cli.main import main
from autotune.errors import AutotuneError
from autotune.outputs.export import export_plan
from autotune.plan.builders import uniform_plan
from autotune.plan.io import PlanFile, read_plan, write_plan_file
from autotune.plan.plan import Plan, StagePlan
from autotune.search.evaluate import evaluate
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import Runtime, load_runtime
from moe_models import tiny_moe

GIB = 2**30
# the old default workload's settings (host dispatch hidden, every ZeRO stage): the offload itself is priced
NEUTRAL = Runtime(name="neutral")


def _fsdp_70b(cluster, n: int):
    """NeMo's GB200 Llama3-70B layout (FSDP over 64 GPUs, micro-batch 2, 8K tokens) with N layers offloaded."""
    return evaluate(load_preset("llama3-70b"), 64, cluster=cluster, zero=3, micro_batch=2, global_batch=128,
                    seq_len=8192, activation_offload_layers=n, runtime=NEUTRAL)


def _slow_host(cluster):
    """The same cluster with a PCIe Gen4 x16 host link (26.3 GB/s host-to-device, dgx-a100-80gb's)."""
    return replace(cluster, host_link=replace(cluster.host_link, beta_s_per_byte=1 / 26.3e9))


def test_memory_falls_with_the_offloaded_layers():
    cluster = resolve_cluster("gb200-nvl72-64")
    runs = {n: _fsdp_70b(cluster, n) for n in (0, 1, 2, 20, 40, 79)}
    peaks = [runs[n].peak_memory_bytes_per_gpu for n in (1, 2, 20, 40, 79)]
    assert all(a > b for a, b in zip(peaks, peaks[1:]))
    # one offloaded layer's set stays on the GPU (the one leaving as the forward ends, reloaded first)
    assert runs[1].peak_memory_bytes_per_gpu == pytest.approx(runs[0].peak_memory_bytes_per_gpu)
    act = {n: runs[n].stages[0].memory_bytes["activations_bytes"] for n in runs}
    per_layer = (act[0] - act[2]) / 1.0
    assert act[0] - act[40] == pytest.approx(39 * per_layer, rel=1e-9)
    host = {n: runs[n].stages[0].memory_bytes["offloaded_bytes"] for n in runs}
    assert host[0] == 0 and host[40] == pytest.approx(40 * per_layer, rel=1e-9)


def test_time_grows_with_the_layers_on_a_slow_link_and_little_over_nvlink_c2c():
    c2c = resolve_cluster("gb200-nvl72-64")
    pcie = _slow_host(c2c)
    base = _fsdp_70b(c2c, 0).step_time_s
    assert _fsdp_70b(pcie, 0).step_time_s == pytest.approx(base)
    slow = [_fsdp_70b(pcie, n).step_time_s for n in (10, 20, 40, 60, 79)]
    assert all(a <= b for a, b in zip(slow, slow[1:])) and slow[-1] > slow[0]
    assert slow[2] > 1.2 * base  # 40 layers over PCIe Gen4 outrun two layers' compute each
    for n in (20, 40, 79):  # NVLink-C2C's 201 GB/s hides them behind the neighbouring layers
        assert _fsdp_70b(c2c, n).step_time_s <= 1.02 * base


def test_moe_stage_offloads_too():
    model = tiny_moe()
    kwargs = dict(model=model, gpus=1, cluster="dgx-h100", global_batch=8, seq_len=128)
    runs = [evaluate(**kwargs, activation_offload_layers=n) for n in (0, 2, 3)]
    act = [r.stages[0].memory_bytes["activations_bytes"] for r in runs]
    assert act[0] > act[1] > act[2]
    assert runs[0].stages[0].memory_bytes["offloaded_bytes"] == 0 < runs[2].stages[0].memory_bytes["offloaded_bytes"]


def _stage(**changes) -> StagePlan:
    base = dict(layers=(0, 8), has_embedding=True, has_head=True, num_gpus=1, tp=1, cp=1, dp=1)
    return StagePlan(**{**base, **changes})


@pytest.mark.parametrize("changes, needle", [
    (dict(activation_offload_layers=8), "layers - 1 = 7"),
    (dict(activation_offload_layers=-1), "whole number"),
    (dict(activation_offload_layers=True), "whole number"),
    (dict(activation_offload_layers=2, activations_in="host"), "activations_in"),
    (dict(activation_offload_layers=2, recompute="full"), "recomputation"),
    (dict(activation_offload_layers=2, recompute_modules=("mlp",)), "recomputation"),
])
def test_bad_offload_layers_are_refused(changes, needle):
    with pytest.raises(AutotuneError) as err:
        _stage(**changes)
    assert err.value.field == "stage.activation_offload_layers" and needle in err.value.message
    assert "\n" not in str(err.value)


def test_offload_needs_one_pipeline_stage():
    with pytest.raises(AutotuneError) as err:
        uniform_plan(num_layers=8, gpus=2, pp=2, global_batch=4, activation_offload_layers=1)
    assert err.value.field == "activation_offload_layers" and "pipeline" in err.value.message


def test_inference_refuses_it():
    from autotune.spec.resolve import inference_workload
    spec = load_preset("llama3-8b")
    with pytest.raises(AutotuneError) as err:
        evaluate(spec, 1, workload=inference_workload(spec, kind="prefill", batch=1, prompt_len=128),
                 activation_offload_layers=4)
    assert err.value.field == "activation_offload_layers"


def test_plan_json_round_trip(tmp_path):
    spec = load_preset("llama3-8b")
    work = training_workload(spec, global_batch=16)
    plan = uniform_plan(num_layers=spec.num_layers, gpus=8, zero=3, global_batch=16, activation_offload_layers=12)
    assert Plan.from_json(plan.to_json()) == plan
    assert json.loads(plan.to_json())["stages"][0]["activation_offload_layers"] == 12
    path = tmp_path / "plan.json"
    write_plan_file(path, plan=plan, model=spec, workload=work, runtime=load_runtime("torch"), cluster="dgx-h100")
    assert read_plan(path).stages[0].activation_offload_layers == 12
    data = json.loads(plan.to_json())
    data["stages"][0]["activation_offload_layers"] = 32
    with pytest.raises(AutotuneError, match="activation_offload_layers"):
        Plan.from_dict(data)


def _plan_file(n: int) -> PlanFile:
    spec = load_preset("llama3-8b")
    work = training_workload(spec, global_batch=16)
    plan = uniform_plan(num_layers=spec.num_layers, gpus=8, zero=3, global_batch=16, activation_offload_layers=n)
    return PlanFile(plan=plan, model=spec, workload=work, cluster="dgx-h100")


def test_megatron_exports_the_flag_and_the_others_refuse():
    text = export_plan(_plan_file(12), "megatron")
    assert "--cpu-offloading-num-layers 12" in text.splitlines()
    assert "--cpu-offloading-num-layers" not in export_plan(_plan_file(0), "megatron")
    for fmt in ("torchtitan", "deepspeed"):
        with pytest.raises(AutotuneError) as err:
            export_plan(_plan_file(12), fmt)
        assert err.value.field == "stages.activation_offload_layers" and "cannot express" in err.value.message


def test_cli_evaluate_flag(capsys):
    # NeMo's Megatron-Core runs ZeRO 3 (Megatron-FSDP) and offloads layers (--cpu-offloading-num-layers)
    args = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--zero", "3", "--global-batch", "16", "--runtime", "nemo",
            "--json"]
    main(args)
    plain = json.loads(capsys.readouterr().out)
    main(args + ["--activation-offload-layers", "16"])
    offloaded = json.loads(capsys.readouterr().out)
    assert offloaded["peak_memory_bytes_per_gpu"] < plain["peak_memory_bytes_per_gpu"]
    assert main(args + ["--activation-offload-layers", "32"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "activation_offload_layers" in err


def test_nemo_gb200_llama3_70b_row_gets_its_recipe_layers(data_dir):
    from autotune.calibrate.modern import modern_run_from_row
    from autotune.calibrate.nemo_recipes import NEMO_ACTIVATION_OFFLOAD
    from autotune.cost.evaluate import evaluate_plan
    from autotune.spec.resolve import resolve_cluster as cluster_of

    rows = {r["id"]: r for r in csv.DictReader(open(data_dir / "modern_runs.csv"))}
    model, workload, runtime, cluster, plan, _ = modern_run_from_row(rows["nemo-mb-060"])
    n, source = NEMO_ACTIVATION_OFFLOAD[("25.09", "GB200", "LLAMA3_70B", "fp8")]
    assert n == 40 and "llama3_70b_llm_pretrain.yaml" in source
    assert [s.activation_offload_layers for s in plan.stages] == [40]
    without = plan.with_changes(stages=tuple(replace(s, activation_offload_layers=0) for s in plan.stages))
    spec = cluster_of(cluster)
    assert (evaluate_plan(model, workload, spec, plan, runtime=runtime).peak_memory_bytes_per_gpu
            < 0.7 * evaluate_plan(model, workload, spec, without, runtime=runtime).peak_memory_bytes_per_gpu)
    # rows whose recipe offloads nothing, or that pipeline, keep 0
    for run_id in ("nemo-mb-011", "nemo-mb-035", "nemo-mb-053"):
        assert all(s.activation_offload_layers == 0 for s in modern_run_from_row(rows[run_id])[4].stages)
