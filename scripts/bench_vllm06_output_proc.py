"""Time vLLM 0.6.0's engine-side output processing of decode tokens: a step at a time (the single-step path RFC
#6913 timed) against a multi-step call of 8 (--num-scheduler-steps 8, with and without async output processing).

vllm 0.6.0 llm_engine.py `_process_model_outputs` does, for each scheduled request, the output processor's work
on its new tokens (append the token, incremental detokenization, stop checks) and, at a call's last step (or
when it finishes), `RequestOutputFactory.create` of its RequestOutput. Single step: both every step
(single_step.py process_outputs). Sync multi-step: once a call, over the call's 8 tokens (llm_engine.py `step`
returns from the first 7 steps without processing; multi_step.py `_process_seq_outputs` loops the tokens). Async
multi-step: each step's token processed in that step's callback (multi_step.py `process_outputs(is_async=True)`
after llm_engine.py `_advance_to_next_step` appended it), the RequestOutput once a call. Here the real 0.6.0 code
runs those calls on Sequence / SequenceGroup objects of B requests (greedy, n = 1, max_tokens not reached) fed the
token stream of this repository's docs/serving.md; not timed: the scheduler's bookkeeping, the metrics loop, the
async engine's stream puts. Prints microseconds a request a decode step for each path, the minimum over repeats.

Run: PYTHONPATH=. python scripts/bench_vllm06_output_proc.py VLLM060 LLAMA3_TOKENIZER_MODEL [B ...]
VLLM060 holds the vllm-0.6.0 wheel unzipped (its Python files; vllm._C, triton, gguf and mistral_common are
not needed: stand-in modules are put in their place, none of them on the timed path). LLAMA3_TOKENIZER_MODEL as
scripts/bench_triton_frontend.py takes it.
"""

from __future__ import annotations

import importlib
import sys
import time
import types
from pathlib import Path

STEPS = 8  # --num-scheduler-steps 8 (PR #8050's runs)
REPEATS = 5


class _Stub(types.ModuleType):
    """A stand-in for a module the timed path does not use: any attribute is an inert class."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda s, *a, **k: None, "__call__": lambda s, *a, **k: None})


def _stub(name: str) -> None:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        key = ".".join(parts[:i])
        if key not in sys.modules:
            module = _Stub(key)
            module.__path__ = []
            sys.modules[key] = module


def load_vllm(root: str) -> dict:
    """vllm 0.6.0's sequence, output and output-processor modules from the unzipped wheel at ``root``."""
    package = types.ModuleType("vllm")
    package.__path__ = [str(Path(root) / "vllm")]
    sys.modules["vllm"] = package  # its __init__ (the engines) is not run
    for name in ("vllm.triton_utils", "vllm.triton_utils.custom_cache_manager", "vllm.triton_utils.importing",
                 "vllm.triton_utils.sample"):
        _stub(name)
    sys.modules["vllm.triton_utils"].HAS_TRITON = False
    sys.modules["vllm.triton_utils"].maybe_set_triton_cache_manager = lambda: None
    sys.modules["vllm.triton_utils.sample"].get_num_triton_sampler_splits = lambda *a: 1
    names = ("vllm.model_executor", "vllm.sequence", "vllm.outputs", "vllm.sampling_params",
             "vllm.engine.output_processor.multi_step", "vllm.engine.output_processor.single_step",
             "vllm.engine.output_processor.stop_checker", "vllm.transformers_utils.detokenizer", "vllm.config")
    for _ in range(50):
        try:
            return {n.split(".")[-1]: importlib.import_module(n) for n in names}
        except ModuleNotFoundError as error:
            if error.name.startswith("vllm"):
                raise
            _stub(error.name)
            for key in [k for k in sys.modules if k.startswith("vllm.") and not isinstance(sys.modules[k], _Stub)]:
                del sys.modules[key]
    raise RuntimeError("vllm 0.6.0 did not import")


class _TokenizerGroup:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def get_lora_tokenizer(self, lora_request=None):
        return self.tokenizer


def _requests(m: dict, tokenizer, batch: int, stream: list[int]) -> list:
    seq_mod, params = m["sequence"], m["sampling_params"]
    groups = []
    for i in range(batch):
        prompt = stream[(i * 211) % 5000:(i * 211) % 5000 + 200]
        seq = seq_mod.Sequence(i, {"prompt_token_ids": prompt, "prompt": None}, 16, tokenizer.eos_token_id)
        sp = params.SamplingParams(temperature=0.0, max_tokens=100_000)
        group = seq_mod.SequenceGroup(str(i), [seq], time.time(), sampling_params=sp)
        group.get_seqs()[0].status = seq_mod.SequenceStatus.RUNNING
        groups.append(group)
    return groups


def _outputs(m: dict, seq_id: int, token: int):
    seq_mod = m["sequence"]
    sample = seq_mod.SequenceOutput(seq_id, token, {token: seq_mod.Logprob(0.0)})
    return seq_mod.CompletionSequenceGroupOutput([sample], None)


def time_paths(m: dict, tokenizer, batch: int, stream: list[int]) -> dict:
    detok = m["detokenizer"].Detokenizer(_TokenizerGroup(tokenizer))
    stop = m["stop_checker"].StopChecker(8192, lambda seq: tokenizer)
    config = m["config"].SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192)
    single = m["single_step"].SingleStepOutputProcessor(config, detok, [], None, stop)
    multi = m["multi_step"].MultiStepOutputProcessor(detok, [], None, lambda seq: tokenizer, stop)
    create = m["outputs"].RequestOutputFactory.create
    best = {}
    for _ in range(REPEATS):
        for path in ("single step", "multi-step sync", "multi-step async"):
            groups = _requests(m, tokenizer, batch, stream)
            tokens = [[stream[(g * 97 + k) % len(stream)] for k in range(STEPS)] for g in range(batch)]
            start = time.perf_counter()
            for g, group in enumerate(groups):
                seq = group.get_seqs()[0]
                if path == "single step":
                    for k in range(STEPS):
                        single.process_outputs(group, [_outputs(m, seq.seq_id, tokens[g][k])], False)
                        create(group)
                elif path == "multi-step sync":
                    multi.process_outputs(group, [_outputs(m, seq.seq_id, t) for t in tokens[g]], False)
                    create(group)
                else:
                    for k in range(STEPS):
                        seq.append_token_id(tokens[g][k], {tokens[g][k]: m["sequence"].Logprob(0.0)})
                        multi.process_outputs(group, [_outputs(m, seq.seq_id, tokens[g][k])], True)
                    create(group)
            per = (time.perf_counter() - start) / (batch * STEPS) * 1e6
            best[path] = min(best.get(path, per), per)
    return best


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_triton_frontend import llama3_tokenizer

    root, model = sys.argv[1], sys.argv[2]
    batches = [int(b) for b in sys.argv[3:]] or [32, 256]
    m = load_vllm(root)
    tokenizer = llama3_tokenizer(model)
    text = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    stream = tokenizer(text, add_special_tokens=False).input_ids
    import platform

    print(f"vllm 0.6.0 output processing, us a request a decode step ({STEPS} steps; min of {REPEATS}); "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    for batch in batches:
        best = time_paths(m, tokenizer, batch, stream)
        print(f"  batch {batch:4d}: " + ", ".join(f"{k} {v:6.1f}" for k, v in best.items())
              + f"; sync multi-step / single step {best['multi-step sync'] / best['single step']:.2f}")


if __name__ == "__main__":
    main()
