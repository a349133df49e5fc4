"""Weights kept in FP8 between steps (Runtime.fp8_params: Transformer Engine's fp8_model_init, set
by Megatron-Core's fp8_param_gather, which NVIDIA's FP8 and MXFP8 recipes turn on)."""

import pytest

from autotune.calibrate.published import load_runs
from autotune.cost.memory import state_bytes_per_param
from autotune.cost.sharding import keeps_fp8_params
from autotune.search.evaluate import evaluate
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload


def test_fp8_weights_hold_no_bf16_copy():
    assert state_bytes_per_param("fp8").weights == 3.0  # BF16 weight + its FP8 cast
    assert state_bytes_per_param("fp8", fp8_params=True).weights == 1.0
    assert state_bytes_per_param("mxfp8", fp8_params=True).weights == pytest.approx(1 + 1 / 32)


def test_fp8_weights_shrink_memory_and_the_weight_all_gather():
    kw = dict(cluster="dgx-h100", dp=16, micro_batch=1, global_batch=64, seq_len=4096, zero=3)
    work = TrainingWorkload(global_batch=64, seq_len=4096, dtype="fp8")
    runtime = Runtime(name="neutral", fp8_recipe="te_current")
    plain = evaluate("llama3-70b", 16, workload=work, runtime=runtime, **kw)
    fp8 = evaluate("llama3-70b", 16, workload=work, runtime=runtime.with_changes(fp8_params=True), **kw)
    assert fp8.memory_breakdown["weights_bytes"] < plain.memory_breakdown["weights_bytes"] / 2
    assert fp8.breakdown["dp_comm_s"] < plain.breakdown["dp_comm_s"]


def test_only_low_precision_recipes_keep_fp8_weights():
    runtime = Runtime(name="neutral", fp8_params=True)
    assert keeps_fp8_params(runtime, "fp8") and keeps_fp8_params(runtime, "mxfp8")
    assert not keeps_fp8_params(runtime, "bf16") and not keeps_fp8_params(runtime, "nvfp4")
    assert not keeps_fp8_params(Runtime(name="neutral"), "fp8")
    # a bf16 step under a runtime that keeps FP8 weights holds and gathers its weights as without it
    kw = dict(cluster="dgx-h100", dp=16, micro_batch=1, global_batch=64, seq_len=4096, zero=3)
    work = TrainingWorkload(global_batch=64, seq_len=4096, dtype="bf16")
    plain = evaluate("llama3-70b", 16, workload=work, runtime=Runtime(name="neutral"), **kw)
    kept = evaluate("llama3-70b", 16, workload=work, runtime=runtime, **kw)
    assert kept.memory_breakdown["weights_bytes"] == plain.memory_breakdown["weights_bytes"]
    assert kept.breakdown["dp_comm_s"] == plain.breakdown["dp_comm_s"]


@pytest.mark.parametrize("run_id, fp8_params", [("nemo-mb-035", True),    # Megatron-Bridge 25.11, FP8
                                                ("nemo-mb-016", False),   # NVFP4: bf16_with_nvfp4_mixed
                                                ("nemo-mb-083", False),   # the table's sub-channel FP8 numbers
                                                ("nemo-2407-01", False),  # NeMo 24.07: not stated
                                                ("tt-27", False)])        # torchtitan: torchao keeps BF16 weights
def test_published_rows_take_their_recipe_setting(data_dir, run_id, fp8_params):
    runs = {run.run_id: run for run in load_runs(data_dir / "modern_runs.csv")[0]}
    assert runs[run_id].runtime.fp8_params is fp8_params
