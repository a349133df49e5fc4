"""Runtimes as an input: presets with sources, --runtime on the commands, plans their runtime can run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from importlib import resources

import pytest

from autotune.calibrate.deepspeed_2021 import (DEEPSPEED_2021_MAX_REUSE_ELEMENTS, DEEPSPEED_2021_PERSISTENCE_ELEMENTS,
                                               PYTHON_OP_S)
from autotune.calibrate.framework_kernels import PYTORCH_GEMM_IN_STEP_HOPPER
from autotune.errors import AutotuneError
from autotune.spec.runtime import (DEFAULT_RUNTIME, SETTING_NAMES, Runtime, load_runtime, runtime_from_dict,
                                   runtime_names)

REQUIRED = ("megatron", "nemo", "torchtitan", "llm-foundry", "deepspeed", "torch", "transformers")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=300)


def test_every_required_runtime_and_the_dated_ones_are_presets():
    assert set(REQUIRED) | {"megatron-2019", "megatron-2021", "deepspeed-2021"} <= set(runtime_names())
    assert DEFAULT_RUNTIME == "megatron"


@pytest.mark.parametrize("name", runtime_names())
def test_every_setting_a_preset_changes_names_its_source(name):
    data = tomllib.loads(resources.files("autotune.data").joinpath("runtimes", f"{name}.toml").read_text())
    assert data["description"].strip()
    for key, entry in data.get("settings", {}).items():
        assert key in SETTING_NAMES, key
        assert set(entry) == {"value", "source"} and len(entry["source"]) > 20, (key, entry)
    runtime = load_runtime(name)
    neutral = Runtime(name="neutral")
    for setting, value in runtime.settings().items():
        if setting == "serving":  # each serving field's own source: tests/test_serving_engines.py
            continue
        if value != getattr(neutral, setting):
            assert runtime.source_of(setting), f"{name}.{setting} = {value!r} has no source"


def test_preset_numbers_are_the_measurements_and_sources_they_cite():
    for name in ("torchtitan", "llm-foundry", "torch", "transformers"):
        # torch and transformers are priced from their operator streams, with in-step speeds measured
        # against them (tests/test_opstream.py); the graph-priced runtimes use the graph's
        if name in ("torchtitan", "llm-foundry"):
            assert math.isclose(load_runtime(name).gemm_speed("hopper"), PYTORCH_GEMM_IN_STEP_HOPPER, abs_tol=5e-4)
        assert load_runtime(name).gemm_speed("other") == 1.0
    assert math.isclose(load_runtime("llm-foundry").attention_speed, 1 / 1.8, rel_tol=1e-3)
    ds = load_runtime("deepspeed-2021")
    assert (ds.zero3_persistence_elements, ds.zero3_max_reuse_elements, ds.gather_host_s_per_rank) == \
        (DEEPSPEED_2021_PERSISTENCE_ELEMENTS, DEEPSPEED_2021_MAX_REUSE_ELEMENTS, PYTHON_OP_S)
    assert math.isclose(ds.param_gather_bytes_per_s, 10e9 * 7 / 8 / 0.42, rel_tol=1e-6)  # DeepSpeed #1174


def test_dated_presets_inherit_and_change_what_changed():
    today, sc21, y2019 = load_runtime("megatron"), load_runtime("megatron-2021"), load_runtime("megatron-2019")
    assert today.attention_impl == "flash" and sc21.attention_impl == "unfused" and y2019.attention_impl == "unfused_eager_mask"
    assert today.overlap_grad_reduce and not sc21.overlap_grad_reduce and not y2019.overlap_p2p_comm
    assert y2019.host_dispatch == today.host_dispatch == "eager"


def test_runtime_validates_itself_and_round_trips():
    with pytest.raises(AutotuneError, match="runtime.fp8_recipe"):
        Runtime(name="x", fp8_recipe="delayed")
    with pytest.raises(AutotuneError, match="runtime.attention_speed"):
        Runtime(name="x", attention_speed=float("inf"))
    with pytest.raises(AutotuneError, match="runtime.qkv_fused"):
        Runtime(name="x", qkv_fused="no")
    with pytest.raises(AutotuneError, match="unknown runtime 'megatorn'.*did you mean 'megatron'"):
        load_runtime("megatorn")
    for name in runtime_names():
        runtime = load_runtime(name)
        assert runtime_from_dict(json.loads(json.dumps(runtime.to_dict()))) == runtime
    custom = load_runtime("torchtitan").with_changes(eager_elementwise=False)
    assert runtime_from_dict(json.loads(json.dumps(custom.to_dict()))) == custom


def test_an_unknown_runtime_or_a_plan_it_cannot_run_is_refused_in_one_line():
    for args in (("evaluate", "--model", "small", "--gpus", "8", "--runtime", "jax"),
                 ("evaluate", "--model", "small", "--gpus", "8", "--runtime", "megatron", "--zero", "3"),
                 ("evaluate", "--model", "small", "--gpus", "8", "--runtime", "deepspeed", "--zero", "3",
                  "--no-reshard-after-forward")):
        out = _cli(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "runtime" in _cli("evaluate", "--model", "small", "--gpus", "8", "--runtime", "jax").stderr
    assert "zero" in _cli("evaluate", "--model", "small", "--gpus", "8", "--runtime", "megatron", "--zero", "3").stderr


def test_every_output_names_its_runtime():
    out = _cli("evaluate", "--model", "small", "--gpus", "8", "--runtime", "torchtitan", "--zero", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].endswith("runtime torchtitan")
    data = json.loads(_cli("evaluate", "--model", "small", "--gpus", "8", "--json").stdout)
    assert data["runtime"]["name"] == "megatron"
    found = json.loads(_cli("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--json",
                            "--runtime", "llm-foundry").stdout)
    assert found["runtime"]["name"] == "llm-foundry" and found["plan"]["stages"][0]["zero"] in (0, 2, 3)


def test_the_runtime_changes_the_prediction_the_way_its_kernels_do():
    from autotune import evaluate

    base = dict(model="llama3-8b", gpus=8, cluster="dgx-h100", zero=3, micro_batch=1)
    fused = evaluate(**base, runtime=load_runtime("torchtitan").with_changes(eager_elementwise=False,
                                                                           gemm_in_step_speed=()))
    eager = evaluate(**base, runtime="torchtitan")
    assert eager.step_time_s > fused.step_time_s * 1.1  # unfused norms and in-step GEMMs on Hopper
    a100 = dict(base, cluster="dgx-a100-80gb")
    plain = load_runtime("torchtitan").with_changes(eager_elementwise=False)
    assert evaluate(**a100, runtime=plain).step_time_s == pytest.approx(
        evaluate(**a100, runtime=plain.with_changes(gemm_in_step_speed=())).step_time_s)  # measured on Hopper only


def test_search_plans_only_what_the_runtime_runs():
    from autotune import search

    for name in ("megatron", "deepspeed"):
        result = search("small", 8, runtime=name, cache=False)
        runtime = load_runtime(name)
        for stage in result.plan.stages:
            assert stage.zero in runtime.zero_stages
            assert stage.reshard_after_forward and stage.dp_shard in (0, stage.dp)
        assert result.runtime == runtime


@pytest.mark.parametrize("model,gpus", [("large", 16), ("llama3-8b", 64)])
def test_the_quick_start_plans_export_to_megatron_core(tmp_path, model, gpus):
    out = _cli("search", "--model", model, "--gpus", str(gpus), "--export", "megatron", "--runs-dir", str(tmp_path),
               "--plots", "none", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["runtime"]["name"] == "megatron" and data["export"]["path"], data.get("export")
    text = open(data["export"]["path"]).read()
    assert "--tensor-model-parallel-size" in text


def test_an_export_the_plan_cannot_take_exits_nonzero(tmp_path):
    out = _cli("search", "--model", "small", "--gpus", "8", "--runtime", "torchtitan", "--export", "deepspeed",
               "--runs-dir", str(tmp_path), "--plots", "none")
    assert out.returncode in (0, 1)
    if out.returncode == 1:
        assert "no deepspeed export" in out.stderr


def test_runtimes_command_lists_every_preset_with_sources():
    out = _cli("runtimes")
    assert out.returncode == 0
    for name in runtime_names():
        assert any(line.startswith(name) for line in out.stdout.splitlines()), name
    detail = _cli("runtimes", "torchtitan").stdout
    assert "qkv_fused = False  (torchtitan llama3 model.py" in detail
    assert _cli("runtimes", "nope").returncode == 2


def test_what_a_run_leaves_out_is_its_runtimes():
    from autotune.plan.runtime_plan import runtime_plan
    from autotune.spec.presets import load_preset

    llama = load_preset("llama3-8b")
    _, plan = runtime_plan(load_runtime("megatron"), llama, gpus=64, global_batch=512, tp=2)
    assert plan.stages[0].zero == 1 and plan.micro_batch == 1 and plan.stages[0].sequence_parallel
    _, plan = runtime_plan(load_runtime("torchtitan"), llama, gpus=64, global_batch=512, pp=4)
    assert plan.stages[0].zero == 3 and plan.num_microbatches == 4  # the local batch over pp micro-batches
    assert not plan.stages[0].reshard_after_forward and plan.stages[0].cp_comm == "all_gather"
    _, plan = runtime_plan(load_runtime("torchtitan"), llama, gpus=64, global_batch=512, recompute="selective")
    assert plan.stages[0].recompute == "selective_op" and plan.stages[0].reshard_after_forward
    _, plan = runtime_plan(load_runtime("llm-foundry"), llama, gpus=8, global_batch=64, zero=2)
    assert plan.stages[0].zero == 3 and not plan.stages[0].reshard_after_forward  # composer's SHARD_GRAD_OP
    _, plan = runtime_plan(load_runtime("meta"), load_preset("llama3-405b"), gpus=1024, global_batch=1024, tp=8, pp=16)
    counts = [s.num_layers for s in plan.stages]  # 126 layers in 128 slots: the embedding and the loss take one each
    assert plan.vpp == 2 and counts[0] == counts[-1] == 7 and set(counts[1:-1]) == {8} and sum(counts) == 126
    _, plan = runtime_plan(load_runtime("nemo"), llama, gpus=16, global_batch=64, tp=2, dtype="nvfp4")
    assert not plan.overlap_tp_comm  # its recipes turn userbuffers off for NVFP4
    _, plan = runtime_plan(load_runtime("nemo"), llama, gpus=16, global_batch=64, tp=2, dtype="fp8")
    assert plan.overlap_tp_comm


def test_jobs_over_several_nvl72_racks_use_64_gpus_of_each():
    from autotune.spec.hardware_data import load_cluster

    nvl72 = load_cluster("gb200-nvl72")
    for gpus in (64, 72, 128, 144, 256):
        nvl72.check_gpus(gpus)
    assert nvl72.for_gpus(128).gpus_per_node == 64 and nvl72.for_gpus(144).gpus_per_node == 72
    with pytest.raises(AutotuneError, match="or of 64"):
        nvl72.check_gpus(100)
    out = _cli("evaluate", "--model", "llama3-70b", "--gpus", "256", "--cluster", "gb200-nvl72", "--tp", "2", "--pp", "4",
               "--dtype", "fp8", "--runtime", "nemo", "--json")
    assert out.returncode == 0, out.stderr
