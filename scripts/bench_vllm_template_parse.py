"""Time vLLM 0.11.0's per-request chat-template pass for several templates, interleaved, on this CPU.

vLLM 0.11.0 runs `chat_utils.resolve_chat_template_kwargs` on every chat request (added by PR #25794): a
jinja2 parse of the whole template and `find_undeclared_variables`, inside `_preprocess_chat` before the
request's first await, so a burst's parses all run on the API server's loop before any request reaches the
engine core (docs/serving.md, "The 1,000-prompt bursts' distributions"). scripts/bench_vllm_frontend.py
(BENCH_TEMPLATES_ONLY=1) times each template in its own block of 300 calls; on a machine shared with other
jobs the load drifts between blocks, so their ratios drift too. Here the templates take turns, one call
each a round, and each round's time of every template is divided by the first template's in that round:
the median of these paired ratios is what the load moves least.

Run: PYTHONPATH=DEPS:VLLM011 python scripts/bench_vllm_template_parse.py LLAMA3_TOKENIZER_MODEL REF.jinja
[OTHER.jinja ...] (DEPS and VLLM011 as for scripts/bench_vllm_frontend.py). Prints, per template, its
characters, the least and median seconds of a call (wall and thread CPU) and the median ratio to REF.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROUNDS = 400  # one call of every template a round; the first 20 rounds warm caches and are dropped


def parse_times(tok, texts: list[str], rounds: int) -> list[list[tuple[float, float]]]:
    """(wall, thread CPU) seconds of each template's call, round by round."""
    from vllm.entrypoints.chat_utils import resolve_chat_template_kwargs

    kwargs = {"add_generation_prompt": True}
    out: list[list[tuple[float, float]]] = [[] for _ in texts]
    for r in range(rounds):
        for i, text in enumerate(texts):
            t0, c0 = time.perf_counter(), time.thread_time()
            resolve_chat_template_kwargs(tok, text, kwargs)
            if r >= 20:
                out[i].append((time.perf_counter() - t0, time.thread_time() - c0))
    return out


def report(names: list[str], texts: list[str], times: list[list[tuple[float, float]]]) -> None:
    ref = times[0]
    for name, text, ts in zip(names, texts, times):
        wall, cpu = [t[0] for t in ts], [t[1] for t in ts]
        ratio = statistics.median(t[1] / max(r[1], 1e-9) for t, r in zip(ts, ref))
        print(f"{name}: {len(text)} characters; wall least {min(wall) * 1e3:.3f} / median "
              f"{statistics.median(wall) * 1e3:.3f} ms; thread CPU least {min(cpu) * 1e3:.3f} / median "
              f"{statistics.median(cpu) * 1e3:.3f} ms; median paired CPU ratio to {names[0]}: {ratio:.3f}")


def main() -> None:
    if len(sys.argv) < 3 or not all(os.path.exists(a) for a in sys.argv[1:]):
        sys.exit("usage: python scripts/bench_vllm_template_parse.py LLAMA3_TOKENIZER_MODEL REF.jinja [OTHER.jinja ...]")
    from bench_vllm_frontend import cpu_name, model_dir, versions
    from vllm.transformers_utils.tokenizer import get_tokenizer

    print(f"CPU: {cpu_name()}; {versions()}; load average {os.getloadavg()[0]:.2f} at the start")
    tok = get_tokenizer(model_dir(sys.argv[1]))
    names = [Path(p).name for p in sys.argv[2:]]
    texts = [Path(p).read_text() for p in sys.argv[2:]]
    report(names, texts, parse_times(tok, texts, ROUNDS))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
