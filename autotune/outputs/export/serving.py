"""A serving plan as the engine's own launch command: `vllm serve`, `python -m sglang.launch_server`, `trtllm-serve`.

Each command sets what the plan chose (tensor, expert and data parallel degrees, DP attention) and
the limits the prediction assumed (requests and tokens a step, the memory share, the KV cache
dtype), so the engine runs what was priced. Options are the engine's own names at the version of
its preset: vLLM 0.33 and SGLang 0.5.23 are checked by the engines' own argument parsers in
tests/test_serving_export.py, trtllm-serve 0.18.2 against its documented options
(tests/data/serving_engines/trtllm-serve-0.18.2.txt).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from autotune.cost.serving_limits import EngineLimits
from autotune.cost.sglang_memory import engine_reserved_bytes
from autotune.cost.serving_eval import ServingDeployment
from autotune.errors import AutotuneError

__all__ = ["LaunchCommand", "launch_command", "HF_CHECKPOINTS"]

# Hugging Face checkpoints of the model presets (the source of each preset names its config.json)
HF_CHECKPOINTS = {"llama3-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama3-70b": "meta-llama/Llama-3.1-70B-Instruct",
                  "llama3-405b": "meta-llama/Llama-3.1-405B-Instruct", "llama2-70b": "meta-llama/Llama-2-70b-chat-hf",
                  "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
                  "mixtral-8x22b": "mistralai/Mixtral-8x22B-Instruct-v0.1", "deepseek-v3": "deepseek-ai/DeepSeek-V3",
                  "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B", "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
                  "gpt-oss-120b": "openai/gpt-oss-120b", "gpt-oss-20b": "openai/gpt-oss-20b"}


@dataclass(frozen=True, kw_only=True)
class LaunchCommand:
    """``argv`` of one replica's server (or of all, where the engine runs data parallelism itself)."""

    engine: str
    version: str
    argv: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "version": self.version, "argv": list(self.argv), "command": self.text,
                "notes": list(self.notes)}


def _memory_fraction(dep: ServingDeployment) -> float:
    engine, device = dep.runtime.serving, dep.cluster.device
    if engine.memory_rule == "reserved":
        return round((device.memory_bytes - engine.memory_reserved_bytes) / device.memory_bytes, 3)
    if engine.memory_rule == "sglang_reserve":  # the share SGLang 0.5.3-0.5.5 derives itself (cost/sglang_memory.py)
        reserve = engine_reserved_bytes(engine, device.memory_bytes, dep.tp, dep.attention_dp)
        return round((device.memory_bytes - reserve) / device.memory_bytes, 3)
    return engine.fraction_for_tp(dep.tp)


def _fp8_kv(dep: ServingDeployment) -> bool:
    return dep.runtime.serving.kv_bytes_per_element(dep.dtype, 2) == 1.0


def _vllm(dep: ServingDeployment, limits: EngineLimits, model: str) -> tuple[list[str], list[str]]:
    engine = dep.runtime.serving
    argv = ["vllm", "serve", model, "--tensor-parallel-size", str(dep.tp), "--max-num-seqs", str(limits.max_num_seqs),
            "--max-num-batched-tokens", str(limits.max_num_batched_tokens),
            "--gpu-memory-utilization", f"{_memory_fraction(dep):g}", "--block-size", str(engine.kv_block_tokens),
            "--kv-cache-dtype", "fp8" if _fp8_kv(dep) else "auto"]
    notes = []
    if dep.dtype in ("fp8",):
        argv += ["--quantization", "fp8"]
    if engine.scheduler_steps > 1:
        argv += ["--num-scheduler-steps", str(engine.scheduler_steps)]
    if engine.max_model_len:
        argv += ["--max-model-len", str(engine.max_model_len)]
    if dep.replicas > 1 and engine.version.startswith("0.6"):
        notes.append(f"vLLM {engine.version} has no data parallelism: start {dep.replicas} servers, one per {dep.tp} GPUs")
    elif dep.replicas > 1:
        argv += ["--data-parallel-size", str(dep.replicas)]
    if dep.ep > 1:
        argv += ["--enable-expert-parallel"]
    return argv, notes


def _sglang(dep: ServingDeployment, limits: EngineLimits, model: str) -> tuple[list[str], list[str]]:
    engine = dep.runtime.serving
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(dep.tp),
            "--mem-fraction-static", f"{_memory_fraction(dep):g}", "--max-running-requests", str(limits.max_num_seqs),
            "--max-prefill-tokens", str(limits.max_num_batched_tokens),
            "--kv-cache-dtype", "fp8_e4m3" if _fp8_kv(dep) else "auto"]
    if engine.chunked_prefill and engine.prefill_chunk_tokens:
        argv += ["--chunked-prefill-size", str(engine.prefill_chunk_tokens)]
    if dep.dtype == "fp8":
        argv += ["--quantization", "fp8"]
    if dep.replicas > 1:
        argv += ["--dp-size", str(dep.replicas)]
    if dep.ep > 1:
        argv += ["--ep-size", str(dep.ep)]
    if dep.attention_dp:
        argv += ["--enable-dp-attention"]
    return argv, []


def _trtllm(dep: ServingDeployment, limits: EngineLimits, model: str) -> tuple[list[str], list[str]]:
    argv = ["trtllm-serve", model, "--tp_size", str(dep.tp), "--pp_size", "1", "--max_batch_size",
            str(limits.max_num_seqs), "--max_num_tokens", str(limits.max_num_batched_tokens),
            "--kv_cache_free_gpu_memory_fraction", f"{_memory_fraction(dep):g}"]
    notes = []
    if dep.replicas > 1:
        notes.append(f"trtllm-serve runs one replica: start {dep.replicas} servers, one per {dep.tp} GPUs")
    if dep.dtype == "fp8":
        notes.append("serve an FP8 checkpoint (ModelOpt, e.g. nvidia/...-FP8): trtllm-serve takes its quantization from it")
    if dep.ep > 1 or dep.attention_dp:
        raise AutotuneError("export", "trtllm-serve 0.18.2 has no expert-parallel or DP-attention option")
    return argv, notes


_BUILDERS = {"vllm": _vllm, "sglang": _sglang, "trtllm-serve": _trtllm}


def launch_command(dep: ServingDeployment, limits: EngineLimits, *, model: str = "") -> LaunchCommand:
    """The engine's launch command for ``dep`` with the ``limits`` it was priced under."""
    engine = dep.runtime.serving
    if engine.export not in _BUILDERS:
        raise AutotuneError("export", f"{dep.runtime.name} has no launch command autotune writes "
                                      f"(engines with one: {', '.join(_BUILDERS)})")
    checkpoint = model or HF_CHECKPOINTS.get(dep.model.name, dep.model.name)
    argv, notes = _BUILDERS[engine.export](dep, limits, checkpoint)
    if not model and dep.model.name not in HF_CHECKPOINTS:
        notes.append(f"{dep.model.name!r} is a model preset, not a checkpoint: put its checkpoint's path there")
    return LaunchCommand(engine=engine.export, version=engine.version, argv=tuple(argv), notes=tuple(notes))
