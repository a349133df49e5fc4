"""Exports to Megatron-LM, torchtitan and DeepSpeed: every key is one the framework documents
(tests/data/frameworks/*.tsv, read from each framework's source), values respect its choices and
rules, and plans a framework cannot run are refused with the reason."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.spec.resolve import training_workload
from autotune.cli.export_cmd import FORMATS as CLI_FORMATS
from autotune.cli.main import main
from autotune.errors import AutotuneError
from autotune.outputs.export import FORMATS, export, export_plan
from autotune.outputs.export.torchtitan import llama_ffn_hidden
from autotune.plan.builders import uniform_plan
from autotune.plan.io import PlanFile, write_plan_file
from autotune.spec.runtime import load_runtime
from autotune.plan.plan import Plan, StagePlan
from autotune.spec.presets import load_preset
from autotune.spec.workload import InferenceWorkload

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"


def _documented(name: str) -> dict[str, tuple[str, list[str]]]:
    """key -> (kind or type, choices) from a framework's list."""
    rows = {}
    for line in (FRAMEWORKS / name).read_text().splitlines():
        if line and not line.startswith("#"):
            key, kind, choices = line.split("\t")
            rows[key] = (kind, choices.split(",") if choices else [])
    return rows


MEGATRON = _documented("megatron_arguments.tsv")
TORCHTITAN = _documented("torchtitan_job_config_keys.tsv")
DEEPSPEED = _documented("deepspeed_config_keys.tsv")


def plan_file(model: str = "llama3-8b", dtype: str = "bf16", global_batch: int | None = None,
              seq_len: int | None = None, **degrees) -> PlanFile:
    spec = load_preset(model)
    work = training_workload(spec, global_batch=global_batch, seq_len=seq_len, dtype=dtype)
    plan = uniform_plan(num_layers=spec.num_layers, global_batch=work.global_batch,
                        has_embeddings=spec.has_embeddings, **degrees)
    return PlanFile(plan=plan, model=spec, workload=work, cluster="dgx-h100")


def with_layer_counts(pf: PlanFile, counts: list[int]) -> PlanFile:
    """The same plan with ``counts`` layers on the pipeline ranks."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    stages = tuple(replace(s, layers=(a, a + n)) for s, a, n in zip(pf.plan.stages, starts, counts))
    return replace(pf, plan=pf.plan.with_changes(stages=stages))


def with_stage(pf: PlanFile, **changes) -> PlanFile:
    return replace(pf, plan=pf.plan.with_changes(stages=tuple(replace(s, **changes) for s in pf.plan.stages)))


def megatron_flags(text: str) -> dict[str, str | None]:
    flags = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            flag, _, value = line.partition(" ")
            assert flag not in flags, f"{flag} given twice"
            flags[flag] = value or None
    return flags


def flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


PLANS = {
    "tp4-pp4-vpp2-zero1-selective": dict(gpus=64, tp=4, pp=4, vpp=2, sequence_parallel=True, zero=1,
                                         recompute="selective"),
    "tp8-pp2-cp2-zero3-full": dict(gpus=64, tp=8, pp=2, cp=2, sequence_parallel=True, zero=3, recompute="full"),
    "dp8-zero3-offload": dict(gpus=8, zero=3, weights_in="host", optimizer_in="host", gradients_in="host"),
    "tp2-dp4-zero2-full": dict(gpus=8, tp=2, zero=2, recompute="full"),
    "tp2-sp-dp4-zero2-selective-async": dict(gpus=8, tp=2, zero=2, sequence_parallel=True, recompute="selective",
                                             overlap_tp_comm=True),
    "dp16-zero0": dict(gpus=16, micro_batch=2),
    "dp8-zero3-offload-8-layers": dict(gpus=8, zero=3, activation_offload_layers=8),  # Megatron-Core cpu_offloading
}
# The plans each framework can run (the others are refused: see the refusal tests).
EXPORTED = {
    "megatron": ["tp4-pp4-vpp2-zero1-selective", "tp8-pp2-cp2-zero3-full", "tp2-dp4-zero2-full",
                 "tp2-sp-dp4-zero2-selective-async", "dp16-zero0", "dp8-zero3-offload-8-layers"],
    "torchtitan": ["tp8-pp2-cp2-zero3-full", "dp8-zero3-offload", "tp2-sp-dp4-zero2-selective-async", "dp16-zero0",
                   "tp2-dp4-zero2-full"],  # 0.3 has tp without sequence parallelism
    "torchtitan-0.2": ["tp8-pp2-cp2-zero3-full", "dp8-zero3-offload", "tp2-sp-dp4-zero2-selective-async", "dp16-zero0"],
    "deepspeed": ["dp8-zero3-offload", "tp2-dp4-zero2-full", "dp16-zero0"],
}


@pytest.mark.parametrize("name", EXPORTED["megatron"])
def test_megatron_flags_are_documented_with_valid_values(name):
    for flag, value in megatron_flags(export_plan(plan_file(**PLANS[name]), "megatron")).items():
        assert flag in MEGATRON, f"{flag} is not a Megatron-LM option"
        kind, choices = MEGATRON[flag]
        assert (value is None) == (kind == "switch"), f"{flag}: switch/value mismatch ({value!r})"
        assert not choices or value in choices, f"{flag} {value} not in {choices}"


def test_megatron_maps_the_plan():
    pf = plan_file(**PLANS["tp4-pp4-vpp2-zero1-selective"])
    flags = megatron_flags(export_plan(pf, "megatron"))
    assert flags["--tensor-model-parallel-size"] == "4" and flags["--pipeline-model-parallel-size"] == "4"
    assert flags["--num-layers-per-virtual-pipeline-stage"] == str(32 // 4 // 2)
    assert "--sequence-parallel" in flags and "--use-distributed-optimizer" in flags
    assert flags["--recompute-granularity"] == "selective" and "--recompute-method" not in flags
    assert int(flags["--micro-batch-size"]) * pf.plan.num_microbatches * pf.plan.dp == int(flags["--global-batch-size"])
    assert flags["--num-query-groups"] == "8" and "--swiglu" in flags and flags["--normalization"] == "RMSNorm"
    full = megatron_flags(export_plan(plan_file(**PLANS["tp8-pp2-cp2-zero3-full"]), "megatron"))
    assert (full["--recompute-granularity"], full["--recompute-method"], full["--recompute-num-layers"]) == \
        ("full", "uniform", "1")
    assert full["--data-parallel-sharding-strategy"] == "optim_grads_params" and full["--context-parallel-size"] == "2"


def _megatron_split(flags: dict, num_layers: int, pp: int) -> list[int]:
    """Layers per rank as Megatron-LM derives them from the first/last flags (transformer_config.py)."""
    first = int(flags.get("--decoder-first-pipeline-num-layers") or 0)
    last = int(flags.get("--decoder-last-pipeline-num-layers") or 0)
    middle_ranks = pp - (first > 0) - (last > 0)
    rest = num_layers - first - last
    assert middle_ranks == 0 and rest == 0 or rest % middle_ranks == 0
    middle = [rest // middle_ranks] * middle_ranks if middle_ranks else []
    return ([first] if first else []) + middle + ([last] if last else [])


@pytest.mark.parametrize("counts", [[7, 9, 9, 7], [10, 8, 8, 6], [6, 26], [5, 4, 4, 4, 4, 4, 4, 3]])
def test_megatron_uneven_first_and_last_stages(counts):
    pp = len(counts)
    pf = with_layer_counts(plan_file(gpus=8 * pp, tp=8, pp=pp, sequence_parallel=True), counts)
    flags = megatron_flags(export_plan(pf, "megatron"))
    assert "--pipeline-model-parallel-layout" not in flags
    assert _megatron_split(flags, 32, pp) == counts


def _parse_layout(layout: str) -> list[str]:
    """Megatron-LM's layout grammar (PipelineParallelLayerLayout.parse_str_to_list)."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    return text.split("|")


@pytest.mark.parametrize("counts, vpp", [([6, 10, 8, 8], 1), ([4, 12, 8, 8], 2), ([12, 4, 8, 8], 2)])
def test_megatron_layout_for_other_uneven_splits(counts, vpp):
    pf = with_layer_counts(plan_file(gpus=32, tp=8, pp=4, vpp=2 if vpp > 1 else 1, sequence_parallel=True), counts)
    stages = _parse_layout(megatron_flags(export_plan(pf, "megatron"))["--pipeline-model-parallel-layout"])
    assert len(stages) == 4 * vpp and stages[0].startswith("E") and stages[-1].endswith("L")
    per_rank = [sum(stages[c * 4 + r].count("t") for c in range(vpp)) for r in range(4)]
    assert per_rank == counts


def test_megatron_interleaved_micro_batch_groups():
    pf = plan_file(gpus=32, tp=8, pp=4, vpp=2, sequence_parallel=True, global_batch=10)  # 10 micro-batches
    flags = megatron_flags(export_plan(pf, "megatron"))
    assert flags["--microbatch-group-size-per-virtual-pipeline-stage"] == "5"  # 10 % 4 = 2 < pp; 10 % 5 = 0
    with pytest.raises(AutotuneError, match="num_microbatches"):
        export(plan_file(gpus=32, tp=8, pp=4, vpp=2, sequence_parallel=True, global_batch=2), "megatron")


@pytest.mark.parametrize("name", EXPORTED["torchtitan-0.2"])
def test_torchtitan_02_keys_are_documented_with_valid_values(name):
    for key, value in flatten(tomllib.loads(export_plan(plan_file(**PLANS[name]), "torchtitan-0.2"))).items():
        assert key in TORCHTITAN, f"{key} is not a torchtitan v0.2.2 job-config key"
        choices = TORCHTITAN[key][1]
        assert not choices or str(value) in choices, f"{key} = {value!r} not in {choices}"


def test_torchtitan_02_maps_the_plan():
    pf = plan_file(**PLANS["tp8-pp2-cp2-zero3-full"])
    config = tomllib.loads(export_plan(pf, "torchtitan-0.2"))
    par, train = config["parallelism"], config["training"]
    assert (par["tensor_parallel_degree"], par["context_parallel_degree"], par["pipeline_parallel_degree"],
            par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (8, 2, 2, pf.plan.dp, 1)
    assert config["model"] == {"name": "llama3", "flavor": "8B"} and config["activation_checkpoint"]["mode"] == "full"
    assert train["local_batch_size"] == pf.plan.micro_batch * pf.plan.num_microbatches
    assert train["global_batch_size"] == pf.plan.global_batch and train["seq_len"] == pf.workload.seq_len
    parts = par["module_fqns_per_model_part"]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    layers = [m for part in parts for m in part if m.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(32)]


def test_torchtitan_interleaved_parts_loop_over_ranks():
    pf = with_layer_counts(plan_file(gpus=32, tp=8, pp=4, vpp=2, sequence_parallel=True, zero=3), [4, 12, 8, 8])
    par = tomllib.loads(export_plan(pf, "torchtitan-0.2"))["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    sizes = [sum(m.startswith("layers.") for m in part) for part in par["module_fqns_per_model_part"]]
    assert [sizes[r] + sizes[4 + r] for r in range(4)] == [4, 12, 8, 8]  # part c*pp + r runs on rank r


def test_torchtitan_flavour_for_other_llama_shapes():
    spec = load_preset("llama3-8b").with_changes(name="llama-mini", num_layers=4, hidden_size=1024, num_heads=16,
                                                 num_kv_heads=4, ffn_hidden_size=2816)
    work = training_workload(spec, global_batch=8, seq_len=1024)
    pf = PlanFile(plan=uniform_plan(num_layers=4, gpus=8, global_batch=8, zero=3), model=spec, workload=work,
                  cluster="dgx-h100")
    result = export(pf, "torchtitan-0.2")
    assert tomllib.loads(result.text)["model"]["flavor"] == "llama-mini"
    for note in (result.notes[0], export(pf, "torchtitan").notes[0]):
        args = dict(re.findall(r"(\w+)=([\d.]+)", note))
        assert llama_ffn_hidden(int(args["dim"]), int(args["multiple_of"]), float(args["ffn_dim_multiplier"])) == 2816
    assert "--config llama3_llama_mini" in export(pf, "torchtitan").text


@pytest.mark.parametrize("name", EXPORTED["deepspeed"])
def test_deepspeed_keys_are_documented_with_valid_values(name):
    pf = plan_file(**PLANS[name])
    config = json.loads(export_plan(pf, "deepspeed"))
    assert "DeepSpeed 0.19" in config.pop("_autotune")["target"]
    for key, value in flatten(config).items():
        assert key in DEEPSPEED, f"{key} is not a documented DeepSpeed config key"
        choices = DEEPSPEED[key][1]
        assert not choices or str(value) in choices, f"{key} = {value!r} not in {choices}"
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * pf.plan.dp)
    assert config["train_batch_size"] == pf.workload.global_batch


def test_deepspeed_maps_zero_and_offload():
    config = json.loads(export_plan(plan_file(**PLANS["dp8-zero3-offload"]), "deepspeed"))
    zero = config["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_param"]["device"] == "cpu" and zero["offload_optimizer"]["device"] == "cpu"
    assert config["bf16"] == {"enabled": True}
    tp = json.loads(export_plan(plan_file(gpus=8, tp=2, zero=2, sequence_parallel=False), "deepspeed"))
    assert tp["tensor_parallel"] == {"autotp_size": 2}


HETEROGENEOUS = Plan(gpus=12, micro_batch=1, num_microbatches=128, stages=(
    StagePlan(layers=(0, 20), has_embedding=True, has_head=False, num_gpus=8, tp=4, cp=1, dp=2, zero=3),
    StagePlan(layers=(20, 32), has_embedding=False, has_head=True, num_gpus=4, tp=2, cp=1, dp=2, zero=3)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_stages_on_submeshes_of_different_sizes_are_refused(fmt):
    pf = PlanFile(plan=HETEROGENEOUS, model=load_preset("llama3-8b"),
                  workload=training_workload(load_preset("llama3-8b"), global_batch=256), cluster="dgx-h100")
    with pytest.raises(AutotuneError, match=r"stages\.(num_gpus|tp)") as err:
        export(pf, fmt)
    assert "cannot express" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("fmt, pf, field", [
    ("deepspeed", plan_file(gpus=16, tp=8, pp=2, sequence_parallel=True), "stages"),
    ("deepspeed", plan_file(gpus=16, tp=8, cp=2, sequence_parallel=True), "stages.cp"),
    ("deepspeed", plan_file(gpus=16, tp=8, sequence_parallel=True), "stages.sequence_parallel"),
    ("deepspeed", plan_file(gpus=8, recompute="selective"), "stages.recompute"),
    ("deepspeed", plan_file(gpus=8, zero=2, weights_in="host"), "stages.weights_in"),
    ("torchtitan", plan_file(gpus=16, zero=1), "stages.zero"),
    ("torchtitan", plan_file(gpus=16, tp=2, pp=2, zero=0, sequence_parallel=True), "stages.zero"),
    ("torchtitan-0.2", plan_file(gpus=16, tp=2, zero=3, sequence_parallel=False), "stages.sequence_parallel"),
    ("torchtitan-0.2", plan_file(gpus=16, zero=1), "stages.zero"),
    ("torchtitan", plan_file("llama3-8b", gpus=8, zero=3).__class__(
        plan=plan_file(gpus=8, zero=3).plan, model=load_preset("llama3-8b").with_changes(rope_theta=10000.0),
        workload=plan_file(gpus=8, zero=3).workload, cluster="dgx-h100"), "model"),
    ("torchtitan", plan_file(gpus=16, zero=3, dtype="fp16"), "workload.dtype"),
    ("torchtitan", plan_file("large", gpus=8, zero=3), "model"),
    ("megatron", plan_file("xxl-ffn", gpus=8, tp=8, global_batch=4), "model.layer_kind"),
    ("megatron", plan_file(gpus=8, zero=1, weights_in="host"), "stages.weights_in"),
    ("megatron", plan_file(gpus=8, zero=1, optimizer_in="cxl"), "stages.optimizer_in"),
    ("megatron", plan_file(gpus=16, tp=2, mesh_order="dp-tp-cp", sequence_parallel=True), "stages.mesh_order"),
    ("megatron", plan_file(gpus=8, cp=4, seq_len=4092), "stages.cp"),  # Megatron needs seq % (2 cp) == 0
])
def test_plans_a_framework_cannot_run_are_refused(fmt, pf, field):
    with pytest.raises(AutotuneError) as err:
        export(pf, fmt)
    assert err.value.field == field and "cannot express" in err.value.message


@pytest.mark.parametrize("fmt", FORMATS)
def test_unmapped_plan_decisions_are_refused_not_dropped(fmt):
    pf = with_stage(plan_file(gpus=8, zero=3), cache_group_layers=4, cache_tile_tokens=512)
    with pytest.raises(AutotuneError, match="cache_group_layers"):
        export(pf, fmt)


def test_bare_plan_and_unknown_format_are_bad_input():
    pf = plan_file(gpus=8, zero=3)
    with pytest.raises(AutotuneError, match="model and workload"):
        export(replace(pf, model=None), "megatron")
    with pytest.raises(AutotuneError, match="format"):
        export(pf, "nemo")
    with pytest.raises(AutotuneError, match="training configs"):
        export(replace(pf, workload=InferenceWorkload(batch=8, prompt_len=128, output_len=16)), "deepspeed")
    assert CLI_FORMATS == FORMATS


def _write(tmp_path: Path, pf: PlanFile) -> Path:
    run = tmp_path / "run"
    write_plan_file(run / "plan.json", plan=pf.plan, model=pf.model, workload=pf.workload, runtime=load_runtime("megatron"),
                    cluster="dgx-h100")
    return run


def test_cli_export_prints_writes_and_reports_json(tmp_path, capsys):
    run = _write(tmp_path, plan_file(**PLANS["tp4-pp4-vpp2-zero1-selective"]))
    assert main(["export", str(run), "--format", "megatron"]) == 0
    assert "--tensor-model-parallel-size 4" in capsys.readouterr().out
    out = tmp_path / "cfg" / "megatron.args"
    assert main(["export", str(run / "plan.json"), "--format", "megatron", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out"] == str(out) and out.read_text() == report["text"]


@pytest.mark.parametrize("args, needle", [
    (["--format", "nemo"], "format"),
    (["--format", "deepspeed"], "cannot express"),
])
def test_cli_export_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    run = _write(tmp_path, plan_file(**PLANS["tp4-pp4-vpp2-zero1-selective"]))
    proc = subprocess.run([sys.executable, "-m", "autotune", "export", str(run), *args, "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_other_sample_plans_are_refused(fmt):
    for name in set(PLANS) - set(EXPORTED[fmt]):
        with pytest.raises(AutotuneError, match="cannot express"):
            export(plan_file(**PLANS[name]), fmt)


def test_tp_comm_overlap_maps_to_async_tp_and_tp_comm_overlap():
    pf = plan_file(**PLANS["tp2-sp-dp4-zero2-selective-async"])
    config = tomllib.loads(export_plan(pf, "torchtitan-0.2"))
    assert config["parallelism"]["enable_async_tensor_parallel"] and config["compile"]["enable"]
    args = export_plan(pf, "torchtitan").splitlines()
    assert "--compile.enable" in args and "--compile.enable-async-tensor-parallel" in args
    assert "--tp-comm-overlap" in megatron_flags(export_plan(pf, "megatron"))


def test_async_tp_exports_say_the_backward_is_not_overlapped():
    # PyTorch's async TP overlaps the forward pass only (cost/stage.py); an estimate that assumed
    # Megatron's both-pass overlap says so, one made for torchtitan's does not, and Megatron cannot
    # run forward-only overlap
    pf = plan_file(**PLANS["tp2-sp-dp4-zero2-selective-async"])
    assert "forward pass's TP collectives only" in export_plan(pf, "torchtitan-0.2")
    assert "forward pass's TP collectives only" in export_plan(pf, "torchtitan")
    forward_only = replace(pf, plan=replace(pf.plan, overlap_tp_backward=False))
    assert "forward pass's TP collectives only" not in export_plan(forward_only, "torchtitan-0.2")
    with pytest.raises(AutotuneError, match="overlap_tp_backward"):
        export_plan(forward_only, "megatron")


# `autotune search --export FORMAT`: the export lands in the run directory; a refusal is reported
# and the search still succeeds (exit 0). In-process: the CLI's SIGTERM handler is put back after.

@pytest.fixture
def cli(capsys):
    import signal

    previous = signal.getsignal(signal.SIGTERM)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err
    yield run
    signal.signal(signal.SIGTERM, previous)


def test_search_export_writes_into_the_run_directory_like_autotune_export(tmp_path, cli):
    code, out, err = cli("search", "--model", "small", "--gpus", "4", "--runs-dir", str(tmp_path), "--export",
                         "megatron", "--json")
    assert code == 0, err
    report = json.loads(out)
    run = Path(report["run_dir"])
    assert report["export"]["path"] == str(run / "export-megatron.args") and report["export"]["refused"] is None
    code, again, _ = cli("export", str(run), "--format", "megatron")  # autotune export on the run directory
    assert code == 0 and (run / "export-megatron.args").read_text() == again
    assert megatron_flags(again)["--micro-batch-size"] == str(report["plan"]["micro_batch"])


def test_search_export_refusal_is_one_line_exits_1_and_the_run_is_kept(tmp_path, cli):
    code, out, err = cli("search", "--model", "small", "--gpus", "4", "--runs-dir", str(tmp_path), "--export",
                         "torchtitan")
    assert code == 1 and err.count("\n") == 1 and "no torchtitan export: model: torchtitan cannot express" in err, err
    (run,) = tmp_path.iterdir()
    assert f"run directory: {run}" in out and "torchtitan config" not in out
    assert (run / "plan.json").exists() and not list(run.glob("export-*"))


@pytest.mark.parametrize("extra", [["--no-run-dir"], ["--storage", "sqlite:///unused.db"]])
def test_search_export_needs_a_run_directory(tmp_path, cli, extra):
    code, _, err = cli("search", "--model", "small", "--gpus", "4", "--runs-dir", str(tmp_path), "--export",
                       "megatron", *extra)
    assert code == 2 and err.count("\n") == 1 and "export" in err and not list(tmp_path.iterdir())


def test_torchtitan_hsdp_reshard_cp_rotation_and_float8():
    pf = plan_file(gpus=64, cp=2, zero=3, dp_shard=4, reshard_after_forward=False, cp_comm="all_gather",
                   dtype="fp8", global_batch=64, seq_len=8192)
    pf = replace(pf, runtime=load_runtime("torchtitan").with_changes(fp8_all_gather=True))
    config = tomllib.loads(export_plan(pf, "torchtitan-0.2"))
    par = config["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (4, 8)
    assert par["fsdp_reshard_after_forward"] == "never" and par["context_parallel_rotate_method"] == "allgather"
    assert config["model"]["converters"] == ["quantize.linear.float8"]
    assert config["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"] is True
    for key, value in flatten(config).items():
        assert key in TORCHTITAN, f"{key} is not a torchtitan v0.2.2 job-config key"
        assert not TORCHTITAN[key][1] or str(value) in TORCHTITAN[key][1], key
    # Megatron-LM and DeepSpeed have no HSDP setting here: refused, not dropped
    for fmt in ("megatron", "deepspeed"):
        with pytest.raises(AutotuneError, match="dp_shard|reshard|cp_comm|dtype"):
            export(plan_file(gpus=64, zero=3, dp_shard=4, global_batch=64), fmt)
    # torchtitan 0.3: HSDP and reshard as options, float8 only in Python config functions
    bf16 = plan_file(gpus=64, cp=2, zero=3, dp_shard=4, reshard_after_forward=False, global_batch=64, seq_len=8192)
    args = export_plan(bf16, "torchtitan").splitlines()
    assert "--parallelism.data-parallel-shard-degree 4" in args and "--parallelism.fsdp-reshard-after-forward never" in args
    with pytest.raises(AutotuneError, match="workload.dtype"):
        export(pf, "torchtitan")


@pytest.mark.parametrize("dtype, extra, expected", [
    ("fp8", {"fp8_recipe": "cast"}, {"--bf16": None, "--fp8-format": "hybrid", "--fp8-recipe": "tensorwise"}),
    ("fp8", {}, {"--fp8-recipe": "delayed"}),  # the megatron runtime's TE delayed scaling
    ("mxfp8", {"fp8_params": True, "grad_reduce_in_fp32": False},
     {"--fp8-format": "e4m3", "--fp8-recipe": "mxfp8", "--fp8-param-gather": None,
      "--reuse-grad-buf-for-mxfp8-param-ag": None, "--grad-reduce-in-bf16": None}),
    ("nvfp4", {}, {"--bf16": None, "--fp4-format": "e2m1", "--fp4-recipe": "nvfp4"}),
])
def test_megatron_exports_the_low_precision_recipe(dtype, extra, expected):
    """A low-precision workload is not dropped: its format, scaling recipe and FP8 weights are written,
    each a documented Megatron-LM option with a valid value."""
    pf = plan_file(gpus=8, dtype=dtype)
    pf = replace(pf, runtime=load_runtime("megatron").with_changes(**extra))
    flags = megatron_flags(export_plan(pf, "megatron"))
    assert expected.items() <= flags.items()
    for flag, value in flags.items():
        kind, choices = MEGATRON[flag]
        assert (value is None) == (kind == "switch") and (not choices or value in choices), flag


def test_row_wise_fp8_and_fp8_weights_are_refused_where_the_framework_has_no_setting():
    with pytest.raises(AutotuneError, match="per row"):
        export(plan_file(gpus=8, dtype="fp8_rowwise"), "megatron")
    pf = plan_file(gpus=8, zero=3, dtype="fp8")
    with pytest.raises(AutotuneError) as err:
        export(replace(pf, runtime=load_runtime("torchtitan").with_changes(fp8_params=True)), "torchtitan")
    assert err.value.field == "runtime.fp8_params"
