"""Time the benchmark client's own work a streamed chunk: `vllm bench serve`'s and sglang.bench_serving's.

`vllm bench serve` (vllm/benchmarks/serve.py in the installed wheel) is one Python process on one asyncio
loop: ``benchmark`` creates one task a request and gathers them; each task runs the endpoint's request
function (vllm/benchmarks/lib/endpoint_request_func.py ``async_request_openai_completions``, the default
``vllm`` backend), which for every read of the response (``response.content.iter_any()``) decodes the bytes,
splits SSE messages, ``json.loads`` each one and stamps it with ``time.perf_counter()`` (TTFT = first stamp -
send; ITL = stamp gaps; latency = last stamp - send; serve.py's TPOT = (latency - TTFT) / (tokens - 1)).
So every chunk of every stream costs the client loop CPU; under a 1,000-request burst one engine step sends
~1,000 chunks, and a client slower than that stamps them late.

Here a client's real request function (the installed vLLM's, or a given file: the vllm-0.11.0 wheel's
endpoint_request_func.py, the sglang-0.5.3 wheel's bench_serving.py, whose requests each open their own
session) reads streams from a fake server in its own process (a bare asyncio protocol: one socket write a
chunk, a few microseconds, so the client is what falls behind), which sends chunks shaped like vLLM's
completion or chat stream (one ``data:`` line a token, then usage and ``[DONE]``) or SGLang's /generate
stream (the whole text so far in each). It waits until all of a run's streams have arrived, then sends token
k of every stream at ``k x gap`` and prints how late its steps went out. Gap 0: as fast as it can, so the
client lags and its reads carry several chunks (coalesced); a gap the server keeps (its steps' lag well
under it): one read a chunk. Reported, as RESULT lines:
  * a chunk: the client process's CPU seconds from runs that differ only in tokens a stream,
    (least cpu(T2) - least cpu(T1)) / (streams x (T2 - T1)), least over repeats (the machine's other jobs
    only add to it), and the least CPU a chunk of the long runs with everything in (a bound);
  * a request: least cpu(T1) / streams - T1 x the chunk figure (the POST on a new connection, the headers);
  * the least mean TPOT on the client's clock (wall time: on a loaded machine a diagnosis, not a figure).
Run: python scripts/bench_serving_client.py [--streams 64,256,1000] [--gap-ms 150] [--repeats 3]
     [--client FILE --kind vllm|chat|sglang]; the figures in tests/data/serving_client_bench.toml are these
     seven runs: --streams 64,256,1000; --streams 256 --gap-ms 40; --streams 1000 --gap-ms 150; with the
     0.11.0 file --kind chat --streams 1000 (gap 0 and 150 ms); with SGLang's --kind sglang --streams 64,256
     and --streams 256 --gap-ms 40.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time

PORT = 18942
TOKENS = (8, 72)  # T1, T2 tokens a stream: the per-chunk figure is their difference
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def sse(body: dict) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def message(kind: str, k: int, tokens: int) -> bytes:
    """Token k's SSE message (k -1: the chat stream's opening chunk; k == tokens: usage and [DONE]) as the
    servers send it: vLLM's CompletionStreamResponse / ChatCompletionStreamResponse (usage null until the
    last), SGLang's native /generate stream, whose "text" is the whole text so far (sglang 0.5.3 wheel,
    srt/managers/tokenizer_manager.py: ``"text": state.text``)."""
    ident, text = "5b1f0e0a9c2d4e7f8a6b3c1d2e4f6a8b", "".join(f" tok{j % 97}" for j in range(k + 1))
    if kind == "sglang":
        if k == tokens:
            return b"data: [DONE]\n\n"
        meta = {"id": ident, "finish_reason": None, "prompt_tokens": 215, "completion_tokens": k + 1,
                "cached_tokens": 0, "e2e_latency": 0.5}
        return sse({"text": text, "output_ids": [1000 + k % 97], "meta_info": meta})
    head = {"id": ("chatcmpl-" if kind == "chat" else "cmpl-") + ident, "created": 1764320000, "model": MODEL,
            "object": "chat.completion.chunk" if kind == "chat" else "text_completion"}
    if k == tokens:
        usage = {"prompt_tokens": 215, "total_tokens": 215 + tokens, "completion_tokens": tokens}
        return sse(head | {"choices": [], "usage": usage}) + b"data: [DONE]\n\n"
    if kind == "chat":
        delta = {"role": "assistant", "content": ""} if k < 0 else {"content": f" tok{k % 97}"}
        return sse(head | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})
    choice = {"index": 0, "text": f" tok{k % 97}", "logprobs": None, "finish_reason": None, "stop_reason": None}
    return sse(head | {"choices": [choice], "usage": None})


def framed(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
RUNS: dict[str, list] = {}


async def ticker(run: str, streams: list, kind: str, tokens: int, gap_s: float) -> None:
    """Token k of every stream of the run at t0 + k x gap, one socket write each (the server's own work a
    chunk is a few microseconds: the client, not the server, is what falls behind)."""
    loop = asyncio.get_running_loop()
    t0, lags = loop.time(), []
    first = -1 if kind == "chat" else 0
    for k in range(first, tokens + 1):
        await asyncio.sleep(max(0.0, t0 + max(k, 0) * gap_s - loop.time()) if gap_s else 0)
        lags.append(loop.time() - (t0 + max(k, 0) * gap_s))
        frame = framed(message(kind, k, tokens)) + (b"0\r\n\r\n" if k == tokens else b"")
        for tr in streams:
            tr.write(frame)
    for tr in streams:
        tr.close()
    print(f"    server {run}: {len(streams)} streams, mean lag of its steps {sum(lags) / len(lags) * 1e3:.2f} ms,"
          f" the last {lags[-1] * 1e3:.2f} ms", flush=True)


class FakeServer(asyncio.Protocol):
    """One connection: one POST to /run/ID/STREAMS/GAP_MS/<endpoint> (the run's parameters in the path, since
    SGLang's request function sends no extra headers), answered with a stream."""

    def connection_made(self, transport) -> None:
        self.transport, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        head, sep, body = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        hdr = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        if not sep or len(body) < int(hdr.get("content-length", 0)):
            return
        req = json.loads(body[: int(hdr["content-length"])])
        path = lines[0].split()[1]
        _, _, run_id, streams, gap_ms = path.split("/")[:5]
        kind = "chat" if path.endswith("chat/completions") else "sglang" if path.endswith("generate") else "vllm"
        params = req.get("sampling_params", req)
        tokens = int(params.get("max_tokens") or params.get("max_completion_tokens") or params["max_new_tokens"])
        self.transport.write(HEAD)
        run = RUNS.setdefault(run_id, [])
        run.append(self.transport)
        if len(run) == int(streams):
            asyncio.get_running_loop().create_task(ticker(run_id, run, kind, tokens, float(gap_ms) / 1e3))


def serve(port: int) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(FakeServer, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


CLIENT = {"path": "", "kind": "vllm"}  # set by main: the request-function file ('' = installed vLLM's), API
ENDPOINT = {"vllm": "v1/completions", "chat": "v1/chat/completions", "sglang": "generate"}


def client_module():
    """The installed vLLM's endpoint_request_func, or a given file: another vLLM's (the 0.11.0 wheel's imports
    only aiohttp and tqdm) or SGLang's bench_serving.py (its module-level ``args`` set as its CLI would)."""
    if not CLIENT["path"]:
        from vllm.benchmarks.lib import endpoint_request_func

        return endpoint_request_func
    import importlib.util

    name = "bench_client_given"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CLIENT["path"])
        mod = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.args = argparse.Namespace(disable_stream=False, disable_ignore_eos=False, return_logprob=False)
    return sys.modules[name]


def request_call(streams: int, tokens: int, gap_ms: float, run: str):
    """A coroutine factory: one request of the run through the client's own request function."""
    mod = client_module()
    url = f"http://127.0.0.1:{PORT}/run/{run}/{streams}/{gap_ms}/{ENDPOINT[CLIENT['kind']]}"
    common = {"prompt": "hello " * 200, "api_url": url, "prompt_len": 215, "output_len": tokens, "model": MODEL}
    if CLIENT["kind"] == "sglang":  # one aiohttp session a request, made by the function itself
        inp = mod.RequestFuncInput(**common, lora_name=None, image_data=None, extra_request_body={})
        return lambda session: mod.async_request_sglang_generate(inp)
    inp = mod.RequestFuncInput(**common)
    func = mod.async_request_openai_chat_completions if CLIENT["kind"] == "chat" else mod.async_request_openai_completions
    return lambda session: func(inp, session)


async def one_run(streams: int, tokens: int, gap_ms: float, run: str) -> dict:
    """``streams`` requests at once, gathered on one loop (serve.py's benchmark; sglang.bench_serving alike)."""
    import aiohttp

    call = request_call(streams, tokens, gap_ms, run)
    # serve.py's session: one TCPConnector whose limit is the run's concurrency (make_session)
    connector = aiohttp.TCPConnector(limit=streams, limit_per_host=streams, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=3600)) as session:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        outs = await asyncio.gather(*(call(session) for _ in range(streams)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ok = [o for o in outs if o.success]
    assert len(ok) == streams, [o.error for o in outs if not o.success][:1]
    chunks = sum(len(o.itl) + 1 for o in ok)
    assert chunks >= streams * tokens, (chunks, streams, tokens)  # 0.11.0's chat counts the role chunk too
    tpot = sum((o.latency - o.ttft) / (tokens - 1) for o in ok) / streams
    return {"cpu_s": cpu, "wall_s": wall, "chunks": chunks, "tpot_s": tpot, "ttft_s": sum(o.ttft for o in ok) / streams}


def host() -> dict:
    import aiohttp
    import vllm

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "aiohttp": aiohttp.__version__,
            "vllm": vllm.__version__, "load": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def per_chunk(streams: int, lo: list[dict], hi: list[dict]) -> tuple[float, float, float]:
    """CPU a chunk and a request from the least CPU of each length's runs (the code path's own cost; the
    machine's other jobs only add), and the least CPU a chunk of the long runs all included (a bound)."""
    lo_cpu, hi_cpu = min(r["cpu_s"] for r in lo), min(r["cpu_s"] for r in hi)
    chunk = (hi_cpu - lo_cpu) / (streams * (TOKENS[1] - TOKENS[0]))
    return chunk, lo_cpu / streams - TOKENS[0] * chunk, min(r["cpu_s"] / r["chunks"] for r in hi)


async def measure(streams: list[int], gap_ms: float, repeats: int) -> None:
    """Each stream count, ``repeats`` runs of each length; gap 0: the server sends as fast as it can (the
    client reads several chunks at a time); a gap the server keeps: one read a chunk while the client keeps up."""
    for s in streams:
        lo, hi = [], []
        for r in range(repeats):
            lo.append(await one_run(s, TOKENS[0], gap_ms, f"g{gap_ms}-s{s}-{r}-lo"))
            hi.append(await one_run(s, TOKENS[1], gap_ms, f"g{gap_ms}-s{s}-{r}-hi"))
        chunk, req, bound = per_chunk(s, lo, hi)
        tpot = min(r["tpot_s"] for r in hi)
        print(f"RESULT {CLIENT['kind']} gap={gap_ms} ms streams={s}: CPU a chunk {chunk * 1e6:.2f} us, a request "
              f"{req * 1e6:.1f} us, long runs all in {bound * 1e6:.2f} us a chunk; least mean TPOT "
              f"{tpot * 1e3:.2f} ms; load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--streams", default="64,256,1000")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="the server's time between a stream's tokens")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--client", default="", help="an endpoint_request_func.py or sglang bench_serving.py to load")
    ap.add_argument("--kind", default="vllm", choices=sorted(ENDPOINT), help="vllm: --backend vllm (completions); "
                    "chat: --backend openai-chat; sglang: sglang.bench_serving --backend sglang (needs --client)")
    a = ap.parse_args()
    CLIENT.update(path=a.client, kind=a.kind)
    if a.serve:
        serve(PORT)
        return
    server = subprocess.Popen([sys.executable, __file__, "--serve"])
    try:
        time.sleep(3)
        print(host(), CLIENT, flush=True)
        asyncio.run(one_run(8, TOKENS[0], 0, "warm-up"))
        asyncio.run(measure([int(x) for x in a.streams.split(",")], a.gap_ms, a.repeats))
        print(host(), flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
