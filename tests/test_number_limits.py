"""Numbers and sizes (issue 29): every number a flag or a library argument gives is finite and
physically bounded; a size that would take longer than a minute or more memory than there is is
refused up front with the bound in the error; conflicting library arguments are refused."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import autotune
from autotune.cli.main import main
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.spec.presets import load_preset
from autotune.spec.workload import InferenceWorkload, TrainingWorkload
from test_readers import LLAMA, refused

E = ["evaluate", "--model", "small", "--gpus", "8"]
MOE = ["evaluate", "--model", "mixtral-8x7b", "--gpus", "64"]
SERVE = ["evaluate", "--model", "small", "--gpus", "8", "--workload", "serve", "--prompt-len", "64", "--output-len", "16"]
Z3 = E + ["--runtime", "torchtitan", "--zero", "3"]

# argv -> what the one line names
FLAG_CASES = [
    (MOE + ["--expert-load-imbalance", "inf"], "--expert-load-imbalance"),
    (MOE + ["--expert-load-imbalance", "nan"], "--expert-load-imbalance"),
    (MOE + ["--expert-load-imbalance", "1e300"], "--expert-load-imbalance"),
    (MOE + ["--expert-load-imbalance", "-1"], "--expert-load-imbalance"),
    (MOE + ["--expert-load-imbalance", "0.5"], "expert_load_imbalance"),
    (SERVE + ["--target-tpot-ms", "inf"], "--target-tpot-ms"),
    (SERVE + ["--target-tpot-ms", "nan"], "--target-tpot-ms"),
    (SERVE + ["--target-tpot-ms", "1e300"], "--target-tpot-ms"),
    (SERVE + ["--target-tpot-ms", "-1"], "--target-tpot-ms"),
    (SERVE + ["--target-ttft-ms", "inf"], "--target-ttft-ms"),
    (Z3 + ["--param-gather-gbps", "inf"], "--param-gather-gbps"),
    (Z3 + ["--param-gather-gbps", "nan"], "--param-gather-gbps"),
    (Z3 + ["--param-gather-gbps", "1e-300"], "--param-gather-gbps"),
    (Z3 + ["--dp-shard", "-2"], "--dp-shard"),
    (E + ["--workload", "prefill", "--output-len", "-5"], "--output-len"),
    (E + ["--workload", "prefill", "--output-len", "5"], "output_len: a prefill workload generates no tokens"),
    (E + ["--workload", "decode", "--prompt-len", "64", "--output-len", "4", "--target-ttft-ms", "5"], "target_ttft_s"),
    (E + ["--cache-group-layers", "-1"], "--cache-group-layers"),
    (E + ["--cache-group-layers", "1000000000"], "at most 10,000 layers"),
    (E + ["--cache-tile-tokens", "-1"], "--cache-tile-tokens"),
    (E + ["--activation-offload-layers", "-1"], "--activation-offload-layers"),
    (E + ["--recompute", "full", "--recompute-layers", "-1"], "--recompute-layers"),
    (E + ["--recompute", "full", "--recompute-layers", "1000000000"], "--recompute-layers"),
    (E + ["--tp", "1000000000"], "argument --tp: 1,000,000,000 is beyond any real input: at most 1,000,000 GPUs"),
    (E + ["--pp", "1000000000"], "argument --pp"),
    (E + ["--vpp", "1000000000"], "argument --vpp"),
    (E + ["--micro-batch", "1000000000"], "argument --micro-batch"),
    (E + ["--ep", "1e3"], "argument --ep"),
]


@pytest.mark.parametrize("argv, field", FLAG_CASES, ids=[" ".join(a[5:]) for a, _ in FLAG_CASES])
def test_non_finite_and_absurd_flags_are_refused(capsys, tmp_path, monkeypatch, argv, field):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, argv, field)


# ---- sizes within the old limits that hung or exhausted memory -------------------------------

def _config(tmp_path: Path, **changes) -> str:
    path = tmp_path / "deep" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**LLAMA, **changes}))
    return str(path)


@pytest.mark.parametrize("command", ["evaluate", "search"])
def test_a_model_deeper_than_the_limit_is_refused_with_the_bound(capsys, tmp_path, monkeypatch, command):
    """100,000 layers took over a minute to evaluate and exhausted 8 GB in search (issue 29)."""
    monkeypatch.chdir(tmp_path)
    model = _config(tmp_path, num_hidden_layers=100_000)
    extra = ["--runs-dir", "runs"] if command == "search" else ["--pp", "100000"]
    err = refused(capsys, tmp_path, [command, "--model", model, "--gpus", "8", *extra], "config.num_hidden_layers")
    assert "at most 10,000 layers" in err


def test_a_search_deeper_than_it_can_hold_is_refused_evaluate_still_prices_it(capsys, tmp_path, monkeypatch):
    """A search's work grows faster than the square of the layers (1,000 on 64 GPUs: 26 s and
    0.5 GB; 2,000: over 240 s and 2 GB): refused up front with the bound; evaluate prices it."""
    monkeypatch.chdir(tmp_path)
    model = _config(tmp_path, num_hidden_layers=1001)
    err = refused(capsys, tmp_path, ["search", "--model", model, "--gpus", "8", "--runs-dir", "runs"], "model.num_layers")
    assert "at most 1,000 layers" in err
    assert main(["evaluate", "--model", model, "--gpus", "8"]) == 1  # a valid problem: it does not fit
    capsys.readouterr()


BENCHMARK_CASES = [
    (["--seq-len", "1000000000"], "argument --seq-len: 1,000,000,000 is beyond any real input: at most 100,000,000"),
    (["--seq-len", "100000"], "--seq-len: 100000 positions exceed small's maximum sequence length 512"),
    (["--batch", "1000000000"], "argument --batch"),
    (["--seq-len", "8", "--steps", "1000000000"], "--steps: the cost model prices"),
    (["--seq-len", "8", "--warmup", "1000000000"], "--warmup: the cost model prices"),
    (["--seq-len", "8", "--threads", "1000000000"], "--threads"),
    (["--seq-len", "8", "--warmup", "-1"], "--warmup"),
]


@pytest.mark.parametrize("flags, field", BENCHMARK_CASES, ids=[" ".join(f) for f, _ in BENCHMARK_CASES])
def test_benchmark_sizes_are_refused_up_front(capsys, tmp_path, monkeypatch, flags, field):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["benchmark", "--model", "small", *flags], field)


def test_benchmark_of_a_model_larger_than_memory_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, tmp_path, ["benchmark", "--model", "gpt3-175b", "--seq-len", "8"], "--model")
    assert "GiB of tensors" in err and "available" in err


@pytest.mark.parametrize("flags, field", [
    (["--seq-len", "1000000000"], "argument --seq-len"),
    (["--seq-len", "4096"], "--seq-len: 4096 positions exceed small's maximum sequence length 512"),
    (["--batch", "1000000000"], "argument --batch"),
])
def test_graph_sizes_are_refused_up_front(capsys, tmp_path, monkeypatch, flags, field):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["graph", "--model", "small", *flags], field)


@pytest.mark.parametrize("flags, field", [
    (["--threads", "1000000000"], "--threads"),
    (["--workers-per-node", "1000000000"], "--workers-per-node"),
])
def test_profile_counts_are_refused_before_measuring(capsys, tmp_path, monkeypatch, flags, field):
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["profile", "--out", "p.json", *flags], field)


# ---- library arguments -----------------------------------------------------------------------

SMALL = load_preset("small")
PLAN = uniform_plan(num_layers=SMALL.num_layers, gpus=8, tp=2, global_batch=64, sequence_parallel=True)
WORK = TrainingWorkload(global_batch=64, seq_len=512)


def _spec(**changes):
    return dataclasses.replace(SMALL, **changes)


LIBRARY_CASES = {
    "plan-and-tp": (lambda: autotune.evaluate("small", 8, plan=PLAN, tp=2), "tp"),
    "plan-and-zero": (lambda: autotune.evaluate("small", 8, plan=PLAN, zero=1), "zero"),
    "plan-and-recompute": (lambda: autotune.evaluate("small", 8, plan=PLAN, recompute="full"), "recompute"),
    "plan-and-sequence-parallel": (lambda: autotune.evaluate("small", 8, plan=PLAN, sequence_parallel=True),
                                   "sequence_parallel"),
    "plan-and-option": (lambda: autotune.evaluate("small", 8, plan=PLAN, overlap_grad_reduce=False), "overlap_grad_reduce"),
    "plan-and-other-gpus": (lambda: autotune.evaluate("small", 16, plan=PLAN), "gpus"),
    "plan-dict": (lambda: autotune.evaluate("small", 8, plan=PLAN.to_dict()), "plan"),
    "plan-path": (lambda: autotune.evaluate("small", 8, plan="plan.json"), "plan"),
    "workload-and-global-batch": (lambda: autotune.evaluate("small", 8, workload=WORK, global_batch=128), "global_batch"),
    "workload-and-seq-len": (lambda: autotune.evaluate("small", 8, workload=WORK, seq_len=256), "seq_len"),
    "workload-and-attention": (lambda: autotune.evaluate("small", 8, workload=WORK, attention="unfused"), "attention"),
    "workload-and-dtype": (lambda: autotune.evaluate("small", 8, workload=WORK, dtype="fp16"), "dtype"),
    "search-workload-and-global-batch": (lambda: autotune.search("small", 8, workload=WORK, global_batch=128),
                                         "global_batch"),
    "search-workload-and-dtype": (lambda: autotune.search("small", 8, workload=WORK, dtype="fp16"), "dtype"),
    "option-string-for-bool": (lambda: autotune.evaluate("small", 8, overlap_grad_reduce="no"), "overlap_grad_reduce"),
    "option-infinite-count": (lambda: autotune.evaluate("small", 8, cache_group_layers=math.inf), "cache_group_layers"),
    "gpus-infinite": (lambda: autotune.evaluate("small", math.inf), "gpus"),
    "imbalance-infinite": (lambda: TrainingWorkload(global_batch=64, seq_len=512, expert_load_imbalance=math.inf),
                           "expert_load_imbalance"),
    "target-infinite": (lambda: InferenceWorkload(batch=4, prompt_len=64, output_len=4, kind="serve",
                                                  target_tpot_s=math.inf), "target_tpot_s"),
    "output-len-float": (lambda: InferenceWorkload(batch=4, prompt_len=64, output_len=4.5, kind="serve"), "output_len"),
    "prefill-with-output": (lambda: InferenceWorkload(batch=4, prompt_len=64, output_len=4, kind="prefill"), "output_len"),
    "rope-theta-infinite": (lambda: _spec(rope_theta=math.inf), "model.rope_theta"),
    "router-scale-infinite": (lambda: _spec(router_scaling_factor=math.inf), "model.router_scaling_factor"),
    "tied-string": (lambda: _spec(tied_embeddings="no"), "model.tied_embeddings"),
    "layers-float": (lambda: _spec(num_layers=12.0), "model.num_layers"),
    "name-too-long": (lambda: _spec(name="m" * 300), "model.name"),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_CASES))
def test_library_arguments_are_checked(name):
    call, field = LIBRARY_CASES[name]
    with pytest.raises(AutotuneError) as err:
        call()
    assert err.value.field == field, str(err.value)


def test_space_fields_are_typed_in_the_library():
    from autotune.search.space import load_space

    space = load_space("default")
    for changes, field in ((dict(uniform_stages="no"), "space.uniform_stages"), (dict(max_stages=0), "space.max_stages"),
                           (dict(n_trials=10**9), "space.n_trials")):
        with pytest.raises(AutotuneError) as err:
            dataclasses.replace(space, **changes)
        assert err.value.field == field


def test_a_plan_with_its_own_gpu_count_still_evaluates():
    assert autotune.evaluate("small", 8, plan=PLAN).step_time_s > 0
    assert autotune.evaluate("small", plan=PLAN).step_time_s > 0


def test_arguments_the_workload_repeats_with_the_same_value_are_accepted():
    same = autotune.evaluate("small", 8, workload=WORK, global_batch=64, seq_len=512, dtype="bf16")
    assert same.step_time_s == autotune.evaluate("small", 8, workload=WORK).step_time_s
