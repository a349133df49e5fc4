"""CPython's cyclic garbage collector in vLLM 0.11.0's API server with many live streams, on this CPU.

The API server's loop parses requests, decodes the engine core's outputs and writes every stream's chunks;
a collection of the oldest generation walks every tracked container not frozen and stops that loop for its
whole length: every stream waits at once. vLLM 0.11.0 freezes the start-up heap there (gc.collect(); gc.freeze()
in the app's lifespan, entrypoints/openai/api_server.py of the wheel, as in the engine core and the workers), so
what such a collection walks is what serving made since: the requests' objects. This does the same, then measures, with the wheel's own code (the chat
handler, AsyncLLM's API-server half, OutputProcessor) against scripts/bench_vllm_frontend.py's fake engine
core: the objects the collector tracks with STREAMS requests live, the length of forced collections of each
generation, and, over STEPS engine steps streamed to every request, the collections the interpreter itself
starts (gc.callbacks): how many of each generation and how long each took.

Run: PYTHONPATH=DEPS:VLLM011 python scripts/bench_vllm_gc.py LLAMA3_TOKENIZER_MODEL [STREAMS [STEPS]]
(DEPS and VLLM011 as for scripts/bench_vllm_frontend.py; defaults 1000 streams, 60 steps).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]


class Pauses:
    """The interpreter's own collections: (generation, wall seconds, thread CPU seconds) each, through
    gc.callbacks (the CPU time is what the machine's other jobs do not inflate)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, float, float]] = []
        self._t0 = self._c0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0, self._c0 = time.perf_counter(), time.thread_time()
        else:
            self.seen.append((info["generation"], time.perf_counter() - self._t0, time.thread_time() - self._c0))


def forced_s(generation: int, repeats: int = 5) -> tuple[float, float]:
    """Least wall and least thread CPU seconds of gc.collect(generation)."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        gc.collect(generation)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return min(wall), min(cpu)


async def stream_steps(llm, chat, streams: int, steps: int) -> tuple[Pauses, tuple[float, float]]:
    """Start ``streams`` chat requests, then feed ``steps`` engine steps of one token to each; the
    collections started meanwhile, and the mean wall and process CPU seconds of a step (engine message to every
    stream's line)."""
    from bench_vllm_frontend import bodies, outputs, start

    reqs, count = bodies(llm.tokenizer, 64), {"n": 0}
    done = asyncio.Event()

    def on_chunk() -> None:
        count["n"] += 1
        if count["n"] >= streams:
            done.set()

    started = [await start(llm, chat, reqs[i % len(reqs)], on_chunk) for i in range(streams)]
    rids = [rid for _, rid, _ in started]
    text_ids = llm.tokenizer.encode((ROOT / "README.md").read_text(), add_special_tokens=False)
    print(f"{streams} live requests: tracked objects by generation {[len(gc.get_objects(g)) for g in range(3)]}, "
          f"thresholds {gc.get_threshold()}, counts {gc.get_count()}")
    for gen in range(3):
        wall, cpu = forced_s(gen)
        print(f"gc.collect({gen}) with {streams} live requests: least {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU")
    pauses, t0, c0 = Pauses(), time.perf_counter(), time.process_time()
    gc.callbacks.append(pauses)
    for step in range(steps):
        count["n"] = 0
        done.clear()
        ids = [text_ids[(step * 7 + i) % len(text_ids)] for i in range(streams)]
        llm.engine_core.outputs.put_nowait(outputs(llm.engine_core, rids, ids, False))
        await done.wait()
    gc.callbacks.remove(pauses)
    per_step = ((time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps)
    llm.engine_core.outputs.put_nowait(outputs(llm.engine_core, rids, [9906] * streams, finish=True))
    await asyncio.gather(*(task for task, _, _ in started))
    return pauses, per_step


def report(pauses: Pauses, per_step: tuple[float, float], steps: int) -> None:
    for gen in range(3):
        wall = [w for g, w, _ in pauses.seen if g == gen]
        cpu = [c for g, _, c in pauses.seen if g == gen]
        if wall:
            print(f"automatic generation-{gen} collections over {steps} steps: {len(wall)}; wall median "
                  f"{statistics.median(wall) * 1e3:.2f} / most {max(wall) * 1e3:.2f} ms; CPU least {min(cpu) * 1e3:.2f}"
                  f" / median {statistics.median(cpu) * 1e3:.2f} / most {max(cpu) * 1e3:.2f} ms; CPU in all "
                  f"{sum(cpu) * 1e3:.0f} ms")
        else:
            print(f"automatic generation-{gen} collections over {steps} steps: none")
    print(f"mean step (engine message to every stream's SSE line): {per_step[0] * 1e3:.1f} ms wall, "
          f"{per_step[1] * 1e3:.1f} ms process CPU")


def main() -> None:
    if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
        sys.exit("usage: python scripts/bench_vllm_gc.py LLAMA3_TOKENIZER_MODEL [STREAMS [STEPS]]")
    from bench_vllm_frontend import cpu_name, frontend, model_dir, versions

    streams = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    print(f"CPU: {cpu_name()}; {versions()}; load average {os.getloadavg()[0]:.2f} at the start")
    path = model_dir(sys.argv[1])

    async def session() -> None:
        llm, chat = frontend(path)
        print(f"after start-up: tracked objects by generation {[len(gc.get_objects(g)) for g in range(3)]}; "
              f"gc.collect(2) least {forced_s(2)[1] * 1e3:.1f} ms CPU with no request live and nothing frozen")
        gc.collect()
        gc.freeze()  # as the 0.11.0 API server's lifespan does once it has started
        print(f"frozen: {gc.get_freeze_count()} objects; gc.collect(2) least {forced_s(2)[1] * 1e3:.2f} ms CPU "
              "with no request live")
        report(*await stream_steps(llm, chat, streams, steps), steps)

    asyncio.run(session())
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
