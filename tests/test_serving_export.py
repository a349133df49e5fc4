"""Serving plans in the engine's terms: launch commands checked by the engines' own argument parsers.

vLLM 0.33 and SGLang 0.5.23 install here without CUDA wheels (tests/data/serving_engines/requirements.txt,
--no-deps): their parsers run in a subprocess. TensorRT-LLM installs only with CUDA wheels, so
trtllm-serve commands are checked against its documented options (a dated snapshot in tests/data).
Where the engines are not installed the parser tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.errors import AutotuneError
from autotune.outputs.export.serving import launch_command
from autotune.search.serving_engines import best_engine_plan, engine_plans
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime
from autotune.spec.workload import InferenceWorkload

SNAPSHOT = Path(__file__).parent / "data" / "serving_engines" / "trtllm-serve-0.18.2.txt"

_VLLM = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.engine.arg_utils import EngineArgs
top = FlexibleArgumentParser(); sub = top.add_subparsers(dest="subparser")
ServeSubcommand().subparser_init(sub)
out = []
for argv in json.loads(sys.argv[1]):
    args = top.parse_args(argv[1:])
    args.model = args.model_tag  # as `vllm serve` does with its positional model (cli/serve.py)
    engine = EngineArgs.from_cli_args(args)
    out.append({k: getattr(engine, k) for k in ("model", "tensor_parallel_size", "data_parallel_size", "max_num_seqs",
                "max_num_batched_tokens", "gpu_memory_utilization", "block_size", "kv_cache_dtype", "quantization",
                "enable_expert_parallel")})
print(json.dumps(out))
"""
_SGLANG = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
out = []
for argv in json.loads(sys.argv[1]):
    args = ServerArgs.from_cli_args(parser.parse_args(argv[3:]))
    out.append({k: getattr(args, k) for k in ("model_path", "tp_size", "dp_size", "ep_size", "mem_fraction_static",
                "max_running_requests", "max_prefill_tokens", "chunked_prefill_size", "kv_cache_dtype", "quantization",
                "enable_dp_attention")})
print(json.dumps(out))
"""


# The parser's process first imports the engine on its own: exit code NOT_INSTALLED where that fails.
NOT_INSTALLED = 3
_IMPORTED = """
import sys
try:
    import {module}
except Exception:
    sys.exit({code})
"""


def _parse(script: str, argvs: list, module: str) -> list[dict]:
    """Each command parsed by the engine's own parser (one process, which also tells whether the engine
    imports: importing one takes 10 s of CPU, so it is not imported a second time just to ask)."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}  # vLLM's platform check: no GPU is needed to parse
    out = subprocess.run([sys.executable, "-c", _IMPORTED.format(module=module, code=NOT_INSTALLED) + script,
                          json.dumps([list(a) for a in argvs])], capture_output=True, text=True, timeout=900, env=env)
    if out.returncode == NOT_INSTALLED:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed (.ci/run installs tests/data/serving_engines/requirements.txt)")
        pytest.skip(f"{module} is not installed (pip install --no-deps -r tests/data/serving_engines/requirements.txt)")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _plan(runtime: str, model: str, gpus: int, cluster: str = "dgx-h100", **workload):
    work = InferenceWorkload(kind="serve", **{"batch": 64, "prompt_len": 1024, "output_len": 256, **workload})
    best = best_engine_plan(engine_plans(resolve_model(model), gpus, load_cluster(cluster), load_runtime(runtime), work))
    assert best is not None
    return best


@pytest.mark.slow
def test_vllm_parses_the_serve_search_and_other_plans():
    """The issue's check (a serve search for Llama 3.1 70B on 4 H100s with --runtime vllm prints `vllm
    serve` arguments vLLM's parser accepts), and an FP8 data- and expert-parallel plan."""
    out = subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "llama3-70b", "--gpus", "4",
                          "--workload", "serve", "--runtime", "vllm", "--concurrency", "64", "--prompt-len", "1024",
                          "--output-len", "256", "--no-run-dir", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    argv, plan = record["launch"]["argv"], record["plan"]
    assert argv[:2] == ["vllm", "serve"]
    moe = ServingDeployment(model=resolve_model("mixtral-8x7b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("vllm"), tp=2, replicas=4, ep=2, weight_dtype="fp8")
    moe_run = run_serving(moe, Load(kind="max_throughput", num_requests=64, input_len=512, output_len=64))
    parsed, parsed_moe = _parse(_VLLM, [argv, launch_command(moe, moe_run.limits).argv], "vllm")
    assert parsed["model"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert parsed["tensor_parallel_size"] * parsed["data_parallel_size"] == 4 and parsed["tensor_parallel_size"] == plan["tp"]
    assert (parsed["max_num_seqs"], parsed["max_num_batched_tokens"]) == (plan["max_num_seqs"], plan["max_num_batched_tokens"])
    assert parsed["gpu_memory_utilization"] == load_runtime("vllm").serving.memory_fraction
    assert parsed["block_size"] == 16 and parsed["kv_cache_dtype"] == "auto"
    assert (parsed_moe["tensor_parallel_size"], parsed_moe["data_parallel_size"]) == (2, 4)
    assert parsed_moe["enable_expert_parallel"] and parsed_moe["quantization"] == "fp8"


@pytest.mark.slow
def test_sglang_parses_its_launch_commands():
    dense = _plan("sglang", "llama3-8b", 8, prompt_len=512, output_len=128)
    moe = ServingDeployment(model=resolve_model("mixtral-8x7b"), cluster=load_cluster("dgx-h200"),
                            runtime=load_runtime("sglang"), tp=8, ep=8, attention_dp=True, weight_dtype="fp8")
    moe_run = run_serving(moe, Load(kind="max_throughput", num_requests=64, input_len=512, output_len=64))
    cases = ((dense.deployment, dense.run.limits), (moe, moe_run.limits))
    for (dep, limits), parsed in zip(cases, _parse(_SGLANG, [launch_command(d, lim).argv for d, lim in cases], "sglang")):
        assert (parsed["tp_size"], parsed["dp_size"]) == (dep.tp, dep.replicas)
        assert parsed["max_running_requests"] == limits.max_num_seqs
        assert parsed["max_prefill_tokens"] == limits.max_num_batched_tokens
        assert parsed["chunked_prefill_size"] == 8192
        assert 0.5 < parsed["mem_fraction_static"] < 1
    assert parsed["enable_dp_attention"] and parsed["ep_size"] == 8 and parsed["kv_cache_dtype"] == "auto"
    assert parsed["quantization"] == "fp8"


def _snapshot_options() -> dict[str, bool]:
    options = {}
    for line in SNAPSHOT.read_text().splitlines():
        if line.startswith("--"):
            name, takes = line.split()[:2]
            options[name] = takes == "yes"
    return options


def test_trtllm_serve_commands_use_only_its_documented_options():
    options = _snapshot_options()
    best = _plan("tensorrt-llm", "llama3-70b", 8, cluster="dgx-h200")
    argv = launch_command(best.deployment, best.run.limits).argv
    assert argv[0] == "trtllm-serve" and argv[1] == "meta-llama/Llama-3.1-70B-Instruct"
    i = 2
    while i < len(argv):
        assert argv[i] in options, argv[i]
        if options[argv[i]]:
            float(argv[i + 1])  # every value this command sets is a number
            i += 1
        i += 1
    assert dict(zip(argv[2::2], argv[3::2]))["--tp_size"] == str(best.deployment.tp)


def test_commands_follow_the_engine_version():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-a100-80gb"),
                            runtime=load_runtime("vllm-0.6"), tp=1, replicas=2)
    engine = dep.runtime.with_changes(serving=dep.runtime.serving.with_changes(scheduler_steps=10,
                                                                                        max_model_len=4096))
    dep = ServingDeployment(model=dep.model, cluster=dep.cluster, runtime=engine, tp=1, replicas=2)
    run = run_serving(dep, Load(kind="max_throughput", num_requests=32, input_len=256, output_len=32))
    command = launch_command(dep, run.limits)
    assert "--num-scheduler-steps" in command.argv and "--data-parallel-size" not in command.argv
    assert command.argv[command.argv.index("--max-model-len") + 1] == "4096"
    assert any("2 servers" in n for n in command.notes)
    with pytest.raises(AutotuneError, match="launch command"):
        launch_command(ServingDeployment(model=dep.model, cluster=dep.cluster, runtime=load_runtime("mlperf-nvidia-4.1"),
                                         tp=1), run.limits)


def test_the_engine_search_prefers_plans_that_meet_the_targets():
    loose = _plan("vllm", "llama3-8b", 4, batch=128, prompt_len=512, output_len=128)
    assert loose.meets_targets
    # a TPOT target only small per-replica batches reach: the plan meeting it beats faster ones that do not
    tight = _plan("vllm", "llama3-8b", 4, batch=128, prompt_len=512, output_len=128,
                  target_tpot_s=loose.tpot_s * 0.8)
    if tight.meets_targets:
        assert tight.tpot_s <= loose.tpot_s * 0.8
    else:
        assert tight.output_tokens_per_s == loose.output_tokens_per_s
    out = subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "llama3-8b", "--gpus", "1",
                          "--workload", "serve", "--runtime", "sglang", "--space", "default", "--no-run-dir"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "--space" in out.stderr
