"""Time the host code paths a request of TensorRT-LLM 0.14's online-serving table crosses outside the engine.

The table (TensorRT-LLM docs/source/performance/perf-overview.md @258c7540c035, 'Online Serving
Measurements') ran the Triton tensorrtllm_backend v0.14.0 ensemble (all_models/inflight_batcher_llm):
  * preprocessing/1/model.py ``_create_request``: ``tokenizer.encode(text, add_special_tokens=True)`` of the prompt;
  * postprocessing/1/model.py ``execute``: ``tokenizer.batch_decode`` of each streamed token (decoupled mode
    sends every new token alone);
and a client whose columns (Tput(req/s), Mean TTFT, Mean ITL, Total Token Tput, Output Tput, QPS INF) are
those vLLM's benchmarks/benchmark_serving.py prints; its tensorrt-llm request function
(benchmarks/backend_request_func.py async_request_trt_llm @011841309828) opens a new aiohttp session per
request and starts the TTFT clock before ``session.post`` of the JSON body to ``generate_stream``.

Run: python scripts/bench_triton_frontend.py LLAMA3_TOKENIZER_MODEL, the tiktoken BPE file of Llama 3
(llama-models' llama_models/llama3/tokenizer.model; needs the tiktoken package), converted with
transformers' TikTokenConverter, the conversion that produced Llama 3's tokenizer.json. Prints the
minimum over repeats (the code path's own cost; medians on a shared machine measure its other users).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time

import numpy as np

# Llama 3's pre-tokenizer pattern and special tokens (llama-models llama_models/llama3/tokenizer.py)
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
           "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
           "<|eot_id|>", "<|python_tag|>"]
SPECIAL += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(SPECIAL))]
VOCAB = 128000  # regular (BPE) tokens


def llama3_tokenizer(path: str):
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converted = TikTokenConverter(vocab_file=path, pattern=PATTERN, additional_special_tokens=SPECIAL).converted()
    converted.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                             special_tokens=[("<|begin_of_text|>", VOCAB)])
    return PreTrainedTokenizerFast(tokenizer_object=converted, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")


def least_s(fn, repeats: int) -> float:
    for _ in range(10):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def tokenizer_paths(tok) -> None:
    rng = np.random.default_rng(0)
    rates = []
    for ids in (128, 256, 512, 1024, 2048):
        # benchmark_serving's random dataset: the text of consecutive token ids from a random offset
        offsets = rng.integers(0, VOCAB, 8)
        texts = [tok.decode([(int(o) + j) % VOCAB for j in range(ids)]) for o in offsets]
        tokens = sum(len(tok.encode(t)) for t in texts)
        best = sum(least_s(lambda t=t: np.array(tok.encode(t, add_special_tokens=True)).astype(int), 40) for t in texts)
        rates.append(best / tokens)
        print(f"preprocessing encode, {ids}-id prompts ({tokens / len(texts):.0f} tokens back): "
              f"{best / len(texts) * 1e3:.3f} ms a prompt, {best / tokens * 1e6:.2f} us a token")
    print(f"preprocessing encode: median over lengths {np.median(rates) * 1e6:.2f} us a prompt token")
    one = [np.array([int(rng.integers(0, VOCAB))])]

    def postprocess() -> None:  # execute's per-token fake-id check, then batch_decode
        assert one[0][0] < tok.vocab_size
        tok.batch_decode(one, skip_special_tokens=True)

    print(f"postprocessing of one streamed token (vocab_size check, batch_decode): {least_s(postprocess, 2000) * 1e6:.1f} us")


async def _serve(reader, writer) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await reader.read(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += await reader.read(65536)
    chunk = b'data: {"text_output": "Hello", "model_name": "ensemble", "model_version": "1"}\n\n'
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk))
    await writer.drain()
    writer.close()


async def _one_request(port: int, prompt: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        payload = {"accumulate_tokens": True, "text_input": prompt, "temperature": 0.0, "top_p": 1.0,
                   "max_tokens": 256, "stream": True}
        start = time.perf_counter()
        async with session.post(url=f"http://localhost:{port}/v2/models/ensemble/generate_stream", json=payload) as r:
            async for line in r.content:
                line = line.strip()
                if line:
                    json.loads(line.decode("utf-8").removeprefix("data:"))
                    return time.perf_counter() - start
    return float("nan")


async def client_path(prompt: str) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    for _ in range(50):
        await _one_request(port, prompt)
    times = [await _one_request(port, prompt) for _ in range(500)]
    server.close()
    print(f"client to first chunk over loopback (instant server): {min(times) * 1e3:.3f} ms least, "
          f"{float(np.median(times)) * 1e3:.3f} ms median")


def main() -> None:
    if len(sys.argv) != 2 or not os.path.exists(sys.argv[1]):
        sys.exit("usage: python scripts/bench_triton_frontend.py PATH/TO/llama3/tokenizer.model")
    print(f"CPU: {platform.machine()} {platform.processor()}, {os.cpu_count()} cores (this machine's figures)")
    tok = llama3_tokenizer(sys.argv[1])
    tokenizer_paths(tok)
    asyncio.run(client_path(tok.decode(list(range(1000, 1467)))))


if __name__ == "__main__":
    main()
