"""Real torch runs (gloo on CPU): every kind of parallelism reproduces the single-process
losses; a broken gradient sync is caught; crashes, hangs and plans too big for the machine
are reported per plan with no worker left behind; the CLI end to end."""

from autotune.spec.runtime import load_runtime
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from autotune.spec.resolve import resolve_cluster  # noqa: E402
from autotune.cli.main import main  # noqa: E402
from autotune.plan.builders import uniform_plan  # noqa: E402
from autotune.plan.io import write_plan_file  # noqa: E402
from autotune.spec.presets import load_preset  # noqa: E402
from autotune.spec.workload import TrainingWorkload  # noqa: E402
from autotune.validate.runner import PlanCase, ValidateOptions, run_case, validate_cases  # noqa: E402

pytestmark = pytest.mark.slow

GPT = load_preset("gpt3-125m").with_changes(num_layers=4, hidden_size=64, num_heads=2, num_kv_heads=2,
                                            ffn_hidden_size=128, vocab_size=128, max_seq_len=32)  # tied, learned, dropout
LLAMA = load_preset("llama3-8b").with_changes(num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2,
                                              ffn_hidden_size=96, vocab_size=128, max_seq_len=32)  # GQA, SwiGLU
FFN = load_preset("xxl-ffn").with_changes(num_layers=4, hidden_size=64, ffn_hidden_size=128)  # the seed's FFN-only blocks
BATCH = 8


def _options(**changes):
    base = dict(cluster=resolve_cluster("cpu"), runtime=load_runtime("torch"), max_world=4, timeout_s=120.0, numerics_steps=3, warmup_steps=0,
                measured_steps=1)
    return ValidateOptions(**{**base, **changes})


def _case(model, dtype="fp32", schedule=None, **degrees):
    plan = uniform_plan(num_layers=model.num_layers, global_batch=BATCH, **degrees)
    if schedule:
        plan = plan.with_changes(schedule=schedule)
    workload = TrainingWorkload(global_batch=BATCH, seq_len=32, dtype=dtype)
    return PlanCase(name=str(degrees), source="test", model=model, workload=workload, plan=plan)


@pytest.fixture(scope="module")
def references():
    return {}  # single-process losses, shared by the cases of one model


PLANS = [
    (GPT, dict(gpus=2, tp=2, micro_batch=8)),  # TP without SP; learned positions and norms replicated
    (GPT, dict(gpus=2, pp=2, micro_batch=2), "gpipe"),  # tied embeddings across stages
    (GPT, dict(gpus=4, pp=2, tp=2, sequence_parallel=True, micro_batch=2)),
    (GPT, dict(gpus=2, dp=2, zero=1, micro_batch=2)),  # ZeroRedundancyOptimizer, 2 micro-batches accumulated
    (LLAMA, dict(gpus=2, pp=2, vpp=2, micro_batch=2)),  # interleaved 1F1B
    (LLAMA, dict(gpus=4, dp=2, tp=2, sequence_parallel=True, micro_batch=4)),
    (LLAMA, dict(gpus=4, pp=2, dp=2, zero=3, micro_batch=1)),
    (LLAMA, dict(gpus=2, dp=2, zero=2, recompute="selective", micro_batch=4)),
    (FFN, dict(gpus=2, pp=2, micro_batch=2, has_embeddings=False)),
]


@pytest.mark.parametrize("spec", PLANS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s[1].items()))
def test_parallel_losses_match_the_single_process_reference(spec, references):
    model, degrees, *schedule = spec
    result = run_case(_case(model, schedule=schedule[0] if schedule else None, **degrees), _options(), references)
    assert result.status == "ok", result.message
    assert result.numerics_ok and len(result.losses) == 3
    assert result.losses[2] < result.losses[0]  # the model fits the repeated batch
    assert result.max_loss_rel_diff <= 1e-4


def test_mixed_precision_matches_within_its_tolerance(references):
    result = run_case(_case(LLAMA, dtype="bf16", gpus=2, dp=2, micro_batch=4), _options(), references)
    assert result.status == "ok", result.message
    assert result.loss_tolerance == 2e-2


def test_a_missing_gradient_reduction_is_caught(references):
    result = run_case(_case(LLAMA, gpus=2, dp=2, micro_batch=4), _options(), references, fault="skip_grad_sync")
    assert result.status == "numerics_mismatch"
    assert result.max_loss_rel_diff > 1e-3


def _my_workers() -> list[int]:
    """Live processes started by this test process that run a validation worker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and "autotune.validate.worker" in cmd:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("fault,timeout_s,status,text", [("crash", 120.0, "failed", "rank 1 exited with code 3"),
                                                          ("hang", 10.0, "timeout", "no result after")])
def test_crash_and_hang_are_reported_and_no_worker_is_left(fault, timeout_s, status, text, references):
    result = run_case(_case(GPT, gpus=2, dp=2, micro_batch=4), _options(timeout_s=timeout_s), references, fault=fault)
    assert result.status == status
    assert text in result.message
    assert result.predicted_step_time_s is not None  # the prediction is still reported
    assert _my_workers() == []


def test_other_plans_run_after_one_that_cannot(tmp_path, references):
    too_big = uniform_plan(num_layers=4, gpus=8, dp=8, micro_batch=1, global_batch=BATCH)
    small = uniform_plan(num_layers=4, gpus=1, micro_batch=BATCH, global_batch=BATCH)
    workload = TrainingWorkload(global_batch=BATCH, seq_len=32, dtype="fp32")
    results = validate_cases([("big", GPT, workload, too_big), ("small", GPT, workload, small)],
                             _options(max_world=2, measured_steps=2), cache=references)
    assert [r.status for r in results] == ["unsupported", "ok"]
    assert "allows 2" in results[0].message and "--scale" in results[0].message


def test_a_plan_predicted_to_outlive_the_timeout_is_not_started():
    """The default `small` search on the cpu cluster (128 x 512 tokens) is predicted at minutes
    a step: validate says so at once instead of running into the timeout."""
    model = load_preset("small")
    workload = TrainingWorkload(global_batch=128, seq_len=512, dtype="fp32")
    plan = uniform_plan(num_layers=model.num_layers, gpus=2, dp=2, micro_batch=8, global_batch=128)
    results = validate_cases([("default", model, workload, plan)], _options(max_world=2, timeout_s=60.0))
    assert results[0].status == "too-long" and "--scale" in results[0].message
    assert results[0].predicted_step_time_s * 5 > 60.0  # 3 numerics + 1 memory + 1 timed step
    assert results[0].measured_step_time_s is None and not results[0].losses  # nothing was launched
    assert _my_workers() == []


def test_cli_validates_a_run_directory_with_scale(tmp_path, capsys):
    run = tmp_path / "runs" / "20250101-large-16"
    plan = uniform_plan(num_layers=36, gpus=16, tp=4, pp=2, micro_batch=2, global_batch=128, sequence_parallel=True)
    write_plan_file(run / "plan.json", plan=plan, model=load_preset("large"),
                    workload=TrainingWorkload(global_batch=128, seq_len=512), runtime=load_runtime("torch"),
                    cluster="dgx-h100")
    code = main(["validate", str(run), "--scale", "hidden=64,layers=4,seq=32,vocab=128,microbatches=2",
                 "--max-world", "2", "--steps", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert json.loads((run / "validation.json").read_text()) == report
    row = report["plans"][0]
    assert row["status"] == "ok" and row["world_size"] == 2 and row["plan"]["pp"] == 2  # tp 4 -> 1 to fit 2
    assert any("tp 4 -> 1" in note for note in row["notes"])
    for key in ("predicted_step_time_s", "measured_step_time_s", "predicted_peak_memory_bytes",
                "measured_peak_memory_bytes", "step_time_error_pct", "memory_error_pct"):
        assert row[key] is not None


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bare = tmp_path / "bare.json"
    bare.write_text(uniform_plan(num_layers=2, gpus=1, micro_batch=1, global_batch=1).to_json())
    assert main(["validate", str(bare)]) == 2
    assert main(["validate", str(tmp_path / "missing.json")]) == 2
    assert main(["validate", str(bare), "--scale", "depth=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("autotune validate: error:") for line in err)
    assert not (tmp_path / "bare.validation.json").exists()


def test_machine_probe_times_the_profiled_gemm():
    from autotune.validate.probe import machine_slowdown

    slowdown = machine_slowdown(resolve_cluster("cpu").device, processes=1, repeats=5)
    assert 0.2 < slowdown < 20.0  # the shipped profile was measured on this machine kind
    assert _my_workers() == []
