"""Time the whole of vLLM 0.6.0's LLMEngine._process_model_outputs for single decode steps, the path RFC #6913 timed.

scripts/bench_vllm06_output_proc.py times the output processors alone. Here the 0.6.0 wheel's own
`LLMEngine._process_model_outputs` (llm_engine.py) runs, bound to a stand-in engine that holds the real pieces it
calls: SingleStepOutputProcessor (append the token, incremental detokenization with a real Llama 3 fast tokenizer:
transformers_utils/detokenizer.py decode_sequence_inplace / detokenize_incrementally, stop checks),
RequestOutputFactory.create for every request every step, the AsyncLLMEngine output callback
(async_llm_engine.py RequestTracker.process_request_output into each request's AsyncStream), and the stats pass
`do_log_stats` -> `LLMEngine._get_stats` (`vllm serve` leaves --disable-log-stats off). Async output processing
(0.6.0's default with CUDA graphs) also runs `_advance_to_next_step`, which appends the token first; the sync
path appends inside the output processor. Requests hold ShareGPT-like state: prompt and output lengths drawn
from autotune/data/serving_lengths.toml [sharegpt], each request part-way through its output (size-biased:
a running request is more often a long one), tokens from this repository's docs/serving.md. The third
column adds the engine process's pickling of every RequestOutput for the API server (entrypoints/openai/rpc/server.py
generate, the `vllm serve` path of 0.6.0). Not timed: the stat loggers' own log() (LoggingStatLogger prints once in 5 s; Prometheus histograms, prometheus_client not
installed here), the scheduler, the RPC server's ZeroMQ sends and per-request coroutines. Prints the least
CPU time (time.process_time) over repeats, us a step and us a request a step, and the lines through batches 1 and
32 (RFC #6913's two points: 0.2 and 3.4 ms on its Llama3-70B 4 x H100 host) and 1 and 256.

Run: PYTHONPATH=.:scripts python scripts/bench_vllm06_process_outputs.py VLLM060 LLAMA3_TOKENIZER_MODEL [B ...]
(the arguments as scripts/bench_vllm06_output_proc.py takes them; transformers needs tiktoken to read the model).
"""

from __future__ import annotations

import importlib
import pickle
import platform
import sys
import time
import tomllib
import types
from pathlib import Path

import numpy as np

STEPS = 16  # decode steps timed per repeat
REPEATS = 7
ROOT = Path(__file__).resolve().parents[1]


def _modules(root: str) -> dict:
    from bench_vllm06_output_proc import load_vllm

    m = load_vllm(root)
    for name in ("vllm.engine.llm_engine", "vllm.engine.async_llm_engine", "vllm.core.scheduler",
                 "vllm.model_executor.layers.sampler"):
        m[name.split(".")[-1]] = importlib.import_module(name)
    return m


def _lengths(batch: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Prompt lengths and tokens generated so far for ``batch`` running ShareGPT requests."""
    table = tomllib.loads((ROOT / "autotune/data/serving_lengths.toml").read_text())["sharegpt"]
    grid = np.linspace(0.0, 1.0, len(table["output_tokens"]))
    draw = np.interp(rng.random(64 * batch), grid, table["output_tokens"])
    outputs = rng.choice(draw, size=batch, p=draw / draw.sum())  # size-biased: running requests
    prompts = np.interp(rng.random(batch), grid, table["input_tokens"])
    return prompts.astype(int), np.maximum(1, (outputs * rng.random(batch)).astype(int))  # the prompt step's token


def _engine(m: dict, tokenizer, running: list):
    """A stand-in LLMEngine holding the real pieces _process_model_outputs and _get_stats call."""
    detok = m["detokenizer"].Detokenizer(types.SimpleNamespace(get_lora_tokenizer=lambda *a: tokenizer))
    stop = m["stop_checker"].StopChecker(8192, lambda seq: tokenizer)
    config = m["config"].SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192)
    tracker = m["async_llm_engine"].RequestTracker()
    for group in running:
        tracker._request_streams[group.request_id] = m["async_llm_engine"].AsyncStream(group.request_id, None)
    blocks = types.SimpleNamespace(get_num_free_gpu_blocks=lambda: 1000, get_num_free_cpu_blocks=lambda: 100)
    scheduler = types.SimpleNamespace(running=running, swapped=[], waiting=[], block_manager=blocks,
                                      get_prefix_cache_hit_rate=lambda device: -1)
    engine = types.SimpleNamespace(
        model_config=types.SimpleNamespace(embedding_mode=False), scheduler=[scheduler], log_stats=True,
        output_processor=m["single_step"].SingleStepOutputProcessor(config, detok, [scheduler], None, stop),
        step_return_finished_only=False, stat_loggers={}, tracker=tracker, tracer=None,
        cache_config=types.SimpleNamespace(num_gpu_blocks=10000, num_cpu_blocks=1000))
    engine.process_request_outputs_callback = lambda outputs: [
        tracker.process_request_output(o, verbose=False) for o in outputs]
    for name in ("_process_model_outputs", "_advance_to_next_step", "do_log_stats", "_get_stats", "do_tracing"):
        setattr(engine, name, types.MethodType(getattr(m["llm_engine"].LLMEngine, name), engine))
    return engine


def _requests(m: dict, tokenizer, batch: int, stream: list[int], rng) -> list:
    seq_mod = m["sequence"]
    prompts, done = _lengths(batch, rng)
    groups = []
    for i in range(batch):
        start = int(rng.integers(0, len(stream) - 2048))
        seq = seq_mod.Sequence(i, {"prompt_token_ids": stream[start:start + prompts[i]], "prompt": None}, 16,
                               tokenizer.eos_token_id)
        group = seq_mod.SequenceGroup(str(i), [seq], time.time(),
                                      sampling_params=m["sampling_params"].SamplingParams(temperature=0.0,
                                                                                          max_tokens=100_000))
        seq.status = seq_mod.SequenceStatus.RUNNING
        group.update_num_computed_tokens(prompts[i])
        groups.append((group, start + prompts[i], int(done[i])))
    return groups


def _step_args(m: dict, groups: list, stream: list[int], k: int) -> tuple:
    seq_mod, sched = m["sequence"], m["scheduler"]
    outs = []
    for group, at, done in groups:
        token = stream[(at + done + k) % len(stream)]
        outs.append(seq_mod.CompletionSequenceGroupOutput(
            [seq_mod.SequenceOutput(group.seqs[0].seq_id, token, {token: seq_mod.Logprob(0.0)})], None))
    metas = [types.SimpleNamespace(do_sample=True, token_chunk_size=1) for _ in groups]
    scheduled = [sched.ScheduledSequenceGroup(seq_group=g, token_chunk_size=1) for g, _, _ in groups]
    out = sched.SchedulerOutputs(scheduled_seq_groups=scheduled, num_prefill_groups=0,
                                 num_batched_tokens=len(groups), blocks_to_swap_in=[], blocks_to_swap_out=[],
                                 blocks_to_copy=[], ignored_seq_groups=[], num_lookahead_slots=0,
                                 running_queue_size=len(groups), preempted=0)
    return [m["sampler"].SamplerOutput(outputs=outs)], metas, out


def _run(m: dict, engine, groups: list, stream: list[int], steps: range, is_async: bool, rpc: bool) -> float:
    """CPU seconds of ``steps`` decode steps' output processing (step arguments built untimed)."""
    args = [_step_args(m, groups, stream, k) for k in steps]
    ctx = m["llm_engine"].SchedulerContext()
    start = time.process_time()
    for output, metas, out in args:
        ctx.request_outputs.clear()
        if is_async:
            engine._advance_to_next_step(output[0].outputs, metas, out.scheduled_seq_groups)
        ctx.output_queue.append((output, metas, out, is_async, True))
        engine._process_model_outputs(ctx)
        if not is_async:  # llm_engine.py step: the async path logs inside _process_model_outputs
            engine.do_log_stats(out, output)
        if rpc:  # entrypoints/openai/rpc/server.py generate: each output pickled for the API server process
            for request_output in ctx.request_outputs:
                pickle.dumps(request_output, pickle.HIGHEST_PROTOCOL)
    return time.process_time() - start


def time_batch(m: dict, tokenizer, batch: int, stream: list[int]) -> dict:
    best: dict = {}
    for repeat in range(REPEATS):
        for key, is_async, rpc in (("sync", False, False), ("async", True, False), ("async + RPC pickle", True, True)):
            rng = np.random.default_rng(repeat)
            groups = _requests(m, tokenizer, batch, stream, rng)
            engine = _engine(m, tokenizer, [g for g, _, _ in groups])
            for group, at, done in groups:  # bring each request to its tokens so far, untimed
                for k in range(done):
                    engine.output_processor.process_outputs(
                        group, _step_args(m, [(group, at, 0)], stream, k)[0][0].outputs, False)
                group.update_num_computed_tokens(done - 1)  # a decode step computes the last token
            seconds = _run(m, engine, groups, stream, range(STEPS), is_async, rpc)
            best[key] = min(best.get(key, seconds), seconds)
    return {k: v / STEPS for k, v in best.items()}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_triton_frontend import llama3_tokenizer

    root, model = sys.argv[1], sys.argv[2]
    batches = [int(b) for b in sys.argv[3:]] or [1, 32, 256]
    m = _modules(root)
    tokenizer = llama3_tokenizer(model)
    text = (ROOT / "docs" / "serving.md").read_text()
    stream = tokenizer(text, add_special_tokens=False).input_ids
    print(f"vllm 0.6.0 LLMEngine._process_model_outputs, single decode steps (least CPU time of {REPEATS} x "
          f"{STEPS} steps); {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    rows = {}
    for batch in batches:
        rows[batch] = time_batch(m, tokenizer, batch, stream)
        print(f"  batch {batch:4d}: " + ", ".join(
            f"{k} {v * 1e3:7.3f} ms a step ({v / batch * 1e6:6.1f} us a request)" for k, v in rows[batch].items()))
    for top in (32, 256):
        if 1 not in rows or top not in rows:
            continue
        for k in rows[1]:
            slope = (rows[top][k] - rows[1][k]) / (top - 1)
            print(f"  {k}: line through batches 1 and {top}: {(rows[1][k] - slope) * 1e6:.1f} us + "
                  f"{slope * 1e6:.1f} us a sequence (RFC #6913 through 1 and 32, another host: 96.8 + 103.2)")

if __name__ == "__main__":
    main()
