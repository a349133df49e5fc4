"""Time the API-server process of a vLLM V1 deployment: one request's intake and one streamed chunk.

`vllm serve` runs one API-server process (--api-server-count 1) beside the engine core. Its asyncio loop
does, for every chat request (vllm 0.11.0: entrypoints/openai/serving_chat.py create_chat_completion,
v1/engine/async_llm.py generate/add_request, v1/engine/processor.py process_inputs,
v1/engine/core_client.py AsyncMPClient.add_request_async):
  * intake: the ChatCompletionRequest from its JSON body, the chat template, tokenization (through
    AsyncMicrobatchTokenizer's one-thread executor), Processor.process_inputs into an EngineCoreRequest,
    OutputProcessor.add_request, and the msgpack encode of the request for the engine core's socket;
  * per engine step and stream: the msgpack decode of EngineCoreOutputs, OutputProcessor.process_outputs
    (incremental detokenization, the RequestOutput into the request's collector), and the stream
    generator's ChatCompletionStreamResponse serialized into one SSE ``data:`` line.
Here the real code of the installed vLLM runs against a fake engine core (no GPU): add_request_async
encodes the request and returns; get_output_async decodes outputs the benchmark feeds it. Not timed:
uvicorn's HTTP parsing and socket writes, and the ZMQ send/receive (so these are lower bounds).

Run: PYTHONPATH=DEPS:VLLM011 python scripts/bench_vllm_frontend.py LLAMA3_TOKENIZER_MODEL [TEMPLATE.jinja ...],
where VLLM011 holds the vllm-0.11.0 wheel unzipped (its Python files; vllm._C is not needed) and DEPS
what it needs beside this venv: transformers 4.57.1, tokenizers 0.22.1, huggingface_hub 0.36.0 (0.11.0 fails
on transformers 5), tiktoken, setproctitle, blake3, diskcache, gguf (pip install --no-deps --target DEPS).
Llama 3's tiktoken BPE file is the one scripts/bench_triton_frontend.py takes (model
config: tests/data/hf/llama-3-8b.json; Llama 3 Instruct's chat format). Prompts are ~215-token pieces of
this repository's docs/serving.md (the ShareGPT rows' mean prompt: 215,312 tokens over 1000 prompts).
Prints the minimum over repeats (the code path's own cost on this CPU; medians measure the machine's
other users) with the CPU, platform and versions, and for each burst the share of its intake gone before
its first EngineCoreRequest was sent. BENCH_BURST_ONLY=1 runs the bursts alone, BENCH_TEMPLATES_ONLY=1
the templates' parse alone; BENCH_CHAT_TEMPLATE=FILE serves the requests with that template instead of Llama 3's
(the whole intake with another checkpoint's template: tests/data/chat_templates/).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# Llama 3 Instruct's chat format (llama-models llama_models/llama3/chat_format.py: header, content, eot)
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                 "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
                 "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
PROMPT_TOKENS = 215  # vn-go rows: 'Total input tokens 215312' over 1000 prompts


def model_dir(bpe_path: str) -> str:
    from bench_triton_frontend import SPECIAL, llama3_tokenizer

    path = tempfile.mkdtemp(prefix="llama3-")
    tok = llama3_tokenizer(bpe_path)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL[2:]})
    custom = os.environ.get("BENCH_CHAT_TEMPLATE")
    tok.chat_template = Path(custom).read_text() if custom else CHAT_TEMPLATE
    tok.save_pretrained(path)
    (Path(path) / "config.json").write_text((ROOT / "tests/data/hf/llama-3-8b.json").read_text())
    return path


class FakeCore:
    """The engine core's client as the API server uses it; the wire format is vLLM's own msgpack."""

    def __init__(self) -> None:
        from vllm.v1.engine import EngineCoreOutputs
        from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

        self.encoder, self.decoder = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
        self.outputs: asyncio.Queue = asyncio.Queue()
        self.added: dict[str, float] = {}
        self.resources = type("Resources", (), {"engine_dead": False})()

    async def add_request_async(self, request) -> None:
        self.encoder.encode(request)
        self.added[request.request_id] = time.perf_counter()

    async def get_output_async(self):
        return self.decoder.decode(await self.outputs.get())

    async def abort_requests_async(self, request_ids) -> None:
        return None

    def shutdown(self) -> None:
        return None


def frontend(path: str):
    """AsyncLLM's API-server half (its __init__ less the engine-core process) and the chat handler."""
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig
    from vllm.entrypoints.openai.serving_chat import OpenAIServingChat
    from vllm.entrypoints.openai.serving_models import BaseModelPath, OpenAIServingModels
    from vllm.transformers_utils.tokenizer import get_tokenizer
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.engine.processor import Processor

    mc = ModelConfig(model=path, tokenizer=path, dtype="bfloat16", max_model_len=8192)
    vc = VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"))
    llm = object.__new__(AsyncLLM)
    llm.vllm_config, llm.model_config, llm.observability_config = vc, mc, vc.observability_config
    llm.tokenizer = get_tokenizer(path)
    llm.processor = Processor(vllm_config=vc, tokenizer=llm.tokenizer)
    llm.output_processor = OutputProcessor(llm.tokenizer, log_stats=False)
    llm.engine_core, llm.log_requests, llm.log_stats, llm.logger_manager, llm.output_handler = (
        FakeCore(), False, False, None, None)
    models = OpenAIServingModels(engine_client=llm, model_config=mc,
                                 base_model_paths=[BaseModelPath(name="m", model_path=path)])
    chat = OpenAIServingChat(llm, mc, models, "assistant", request_logger=None, chat_template=None,
                             chat_template_content_format="auto")
    return llm, chat


def bodies(tok, count: int) -> list[bytes]:
    """Chat request bodies as `vllm bench serve --backend openai-chat` posts them, prompts of PROMPT_TOKENS."""
    ids = tok.encode((ROOT / "docs/serving.md").read_text(), add_special_tokens=False)
    out = []
    for i in range(count):
        start = (i * 997) % (len(ids) - PROMPT_TOKENS)
        text = tok.decode(ids[start:start + PROMPT_TOKENS])
        out.append(json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], "temperature": 0.0,
                               "max_completion_tokens": 256, "stream": True,
                               "stream_options": {"include_usage": True}}).encode())
    return out


async def start(llm, chat, body: bytes, on_chunk) -> tuple[asyncio.Task, str, float]:
    """The route's work up to the engine core (parse, handler, the stream's first step, which runs
    AsyncLLM.generate's add_request); returns the SSE consumer, the engine's request id and the seconds."""
    from vllm.entrypoints.openai.protocol import ChatCompletionRequest

    core, before, t0 = llm.engine_core, set(llm.engine_core.added), time.perf_counter()
    gen = await chat.create_chat_completion(ChatCompletionRequest.model_validate_json(body), None)

    async def consume() -> None:
        async for chunk in gen:
            if chunk.startswith("data: {"):
                on_chunk()

    task = asyncio.create_task(consume())
    while len(core.added) == len(before):
        await asyncio.sleep(0)
    rid = (set(core.added) - before).pop()
    return task, rid, core.added[rid] - t0


def outputs(core, rids: list[str], token_ids: list[int], finish: bool) -> bytes:
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

    reason = FinishReason.LENGTH if finish else None
    outs = [EngineCoreOutput(request_id=r, new_token_ids=[t], finish_reason=reason) for r, t in zip(rids, token_ids)]
    return core.encoder.encode(EngineCoreOutputs(outputs=outs, timestamp=time.monotonic()))


async def serial_intake(llm, chat, reqs: list[bytes], repeats: int) -> float:
    """Least seconds from a request's JSON body to its EngineCoreRequest sent, one request at a time."""
    best = float("inf")
    for i in range(repeats):
        task, rid, seconds = await start(llm, chat, reqs[i % len(reqs)], lambda: None)
        llm.engine_core.outputs.put_nowait(outputs(llm.engine_core, [rid], [9906], finish=True))
        await task
        best = min(best, seconds) if i >= 20 else best  # the first ones warm caches and the tokenizer thread
    return best


async def burst_intake(llm, chat, reqs: list[bytes], count: int, repeats: int) -> tuple[float, float, float]:
    """Least seconds per request to take in ``count`` requests posted at once (`--request-rate inf`): from
    the first handler call to the last EngineCoreRequest sent, over ``count``; the tokenizer's micro-batches
    (up to 32 prompts, 2 ms wait) fill at once, so this is the loop's own time per request. Also the least
    process CPU seconds per request (the loop's and the tokenizer thread's), which other jobs on a shared
    machine do not inflate as they do the wall clock. Third, the share of the burst's intake (first handler
    call to last EngineCoreRequest) gone before its first EngineCoreRequest is sent, in the least burst: the
    handlers' work before their first suspension (the tokenizer's executor) runs for the whole burst first."""
    from vllm.entrypoints.openai.protocol import ChatCompletionRequest

    core, best, best_cpu, before_first = llm.engine_core, float("inf"), float("inf"), 0.0

    async def one(body: bytes) -> None:
        gen = await chat.create_chat_completion(ChatCompletionRequest.model_validate_json(body), None)
        async for _ in gen:
            pass

    for _ in range(repeats):
        core.added.clear()
        t0, cpu0 = time.perf_counter(), time.process_time()
        tasks = [asyncio.create_task(one(reqs[i % len(reqs)])) for i in range(count)]
        while len(core.added) < count:
            await asyncio.sleep(0.001)
        best_cpu = min(best_cpu, (time.process_time() - cpu0) / count)
        wall = max(core.added.values()) - t0
        if wall / count < best:
            best, before_first = wall / count, (min(core.added.values()) - t0) / wall
        core.outputs.put_nowait(outputs(core, list(core.added), [9906] * count, finish=True))
        await asyncio.gather(*tasks)
    return best, best_cpu, before_first


async def streaming(llm, chat, reqs: list[bytes], streams: int, steps: int) -> tuple[float, float]:
    """Least seconds per stream of one engine step's outputs, from the engine core's message to every
    stream's SSE line, with ``streams`` requests streaming at once."""
    counter = {"n": 0}
    done = asyncio.Event()

    def on_chunk() -> None:
        counter["n"] += 1
        if counter["n"] >= streams:
            done.set()

    started = [await start(llm, chat, reqs[i % len(reqs)], on_chunk) for i in range(streams)]
    rids = [rid for _, rid, _ in started]
    text_ids = llm.tokenizer.encode((ROOT / "README.md").read_text(), add_special_tokens=False)
    best, best_cpu = float("inf"), float("inf")
    for step in range(steps + 2):  # the first two carry the role chunk; not timed
        msg = outputs(llm.engine_core, rids, [text_ids[(step * 7 + i) % len(text_ids)] for i in range(streams)], False)
        counter["n"], t0, cpu0 = 0, time.perf_counter(), time.process_time()
        done.clear()
        llm.engine_core.outputs.put_nowait(msg)
        await done.wait()
        if step >= 2:
            best = min(best, (time.perf_counter() - t0) / streams)
            best_cpu = min(best_cpu, (time.process_time() - cpu0) / streams)
    llm.engine_core.outputs.put_nowait(outputs(llm.engine_core, rids, [9906] * streams, finish=True))
    await asyncio.gather(*(task for task, _, _ in started))
    return best, best_cpu


def versions() -> str:
    import tokenizers
    import transformers
    import vllm

    return (f"vllm {vllm.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
            f"Python {platform.python_version()}")


def cpu_name() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor()


def template_parse_s(tok, repeats: int, template: str | None = None) -> float:
    """Least seconds of chat_utils.resolve_chat_template_kwargs, which 0.11.0 runs on every chat request:
    a jinja2 parse of the whole template and find_undeclared_variables (a compile pass); later releases
    cache it (renderers/hf.py _cached_resolve_chat_template_kwargs in the 0.33.0 wheel)."""
    from vllm.entrypoints.chat_utils import resolve_chat_template_kwargs

    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        resolve_chat_template_kwargs(tok, template or tok.chat_template, {"add_generation_prompt": True})
        best = min(best, time.perf_counter() - t0)
    return best


async def run(path: str, templates: list[str]) -> None:
    llm, chat = frontend(path)
    reqs = bodies(llm.tokenizer, 64)
    if os.environ.get("BENCH_BURST_ONLY"):  # the bursts alone (a shorter run)
        await bursts(llm, chat, reqs)
        return
    for name, text in [("Llama 3", CHAT_TEMPLATE)] + [(t, Path(t).read_text()) for t in templates]:
        print(f"resolve_chat_template_kwargs ({name}: {len(text)}-character template): "
              f"{template_parse_s(llm.tokenizer, 300, text) * 1e3:.3f} ms least of 300")
    if os.environ.get("BENCH_TEMPLATES_ONLY"):  # the templates' per-request parse alone
        return
    print(f"intake one at a time (JSON body -> EngineCoreRequest encoded; includes the tokenizer's 2 ms "
          f"micro-batch wait), {PROMPT_TOKENS}-token chat prompts: {await serial_intake(llm, chat, reqs, 300) * 1e3:.3f} ms least of 280")
    await bursts(llm, chat, reqs)
    for streams in (1, 64, 256, 1000):
        per, cpu = await streaming(llm, chat, reqs, streams, 30 if streams < 1000 else 12)
        print(f"streaming, {streams} streams: {per * 1e6:.1f} us wall, {cpu * 1e6:.1f} us CPU a stream a step "
              f"(least of the steps)")


async def bursts(llm, chat, reqs: list[bytes]) -> None:
    for count in (256, 1000):
        per, cpu, first = await burst_intake(llm, chat, reqs, count, 5)
        print(f"intake of {count} requests posted at once: {per * 1e3:.3f} ms wall, {cpu * 1e3:.3f} ms CPU a request "
              f"(least of 5 bursts); {first:.3f} of that burst's intake before its first EngineCoreRequest")


def main() -> None:
    if len(sys.argv) < 2 or not all(os.path.exists(a) for a in sys.argv[1:]):
        sys.exit("usage: python scripts/bench_vllm_frontend.py PATH/TO/llama3/tokenizer.model [CHAT_TEMPLATE.jinja ...]"
                 " (other models' templates: their per-request parse timed too)")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; {platform.platform()}; {time.strftime('%Y-%m-%d')}")
    print(versions())
    asyncio.run(run(model_dir(sys.argv[1]), sys.argv[2:]))


if __name__ == "__main__":
    main()
