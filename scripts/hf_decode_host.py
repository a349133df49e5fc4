"""Where a transformers decode step's time goes on the host: the model's forward, generate's own loop.

scripts/hf_infer_bench.py found `generate` decode steps of 1-8B models on an H200 taking 34-83 ms while
their kernels ran 2-17 ms: the host bounds them. This splits the step on the same machine:

* the model's forward for one new token (DynamicCache, SDPA, bf16), run in a plain loop: its wall
  time with a synchronisation each step, and its host issue time (the call's return, no sync);
* its kernel launches (torch.profiler);
* `generate`'s step: (wall of generate(1 + N) - wall of generate(1)) / N, so its own per-step
  work (logits processors, stopping criteria, input preparation) is the difference;
* the host's speed, in the units cost/host.py prices: the host time of one nn.Linear forward
  (BF16, hidden 2048, 8192 tokens; TransformerEngine issue #2053's measure) and of one tiny
  elementwise kernel.
Usage: python hf_decode_host.py CASES.json OUT.jsonl     (CASES: [{"name", "config", "batch", "prompt_len"}])
"""
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_infer_bench import _host, _profiled_kernels  # noqa: E402

STEPS = 24


def _median_s(fn, repeats: int, sync_inside: bool) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if sync_inside:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        torch.cuda.synchronize()
    return statistics.median(times)


def host_reference() -> dict:
    """Host seconds per call of an nn.Linear forward and of a one-element add, issued back to back
    (fewer calls than the launch queue holds, so the host never waits for the GPU)."""
    lin = torch.nn.Linear(2048, 2048, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8192, 2048, device="cuda", dtype=torch.bfloat16)
    a = torch.zeros(1, device="cuda")
    out = {}
    for name, fn, grad in (("linear_fwd_s", lambda: lin(x), True), ("linear_fwd_no_grad_s", lambda: lin(x), False),
                           ("add_s", lambda: a.add_(1.0), False)):
        with torch.set_grad_enabled(grad):
            for _ in range(50):
                fn()
            samples = []
            for _ in range(7):
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(200):
                    fn()
                samples.append((time.perf_counter() - t) / 200)
            torch.cuda.synchronize()
        out[name] = statistics.median(samples)
    return out


def run_case(case: dict) -> dict:
    cfg = AutoConfig.from_pretrained(case["config"])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    b, p = case["batch"], case["prompt_len"]
    x = torch.randint(0, cfg.vocab_size, (b, p), device="cuda")
    with torch.inference_mode():
        out = model(input_ids=x, use_cache=True, logits_to_keep=1)
        cache, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

        def step():
            nonlocal tok
            logits = model(input_ids=tok, past_key_values=cache, use_cache=True).logits
            tok = logits[:, -1].argmax(-1, keepdim=True)

        for _ in range(5):
            step()
        synced_s = _median_s(step, STEPS, sync_inside=True)
        issue_s = _median_s(step, STEPS, sync_inside=False)
        kernels = _profiled_kernels(step, "cuda")

    mask = torch.ones_like(x)

    def generate(tokens: int):
        with torch.inference_mode():
            return model.generate(input_ids=x, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                  do_sample=False, pad_token_id=0)

    generate(4)
    first = _median_s(lambda: generate(1), 3, sync_inside=True)
    many = _median_s(lambda: generate(1 + STEPS), 2, sync_inside=True)
    generate_step_s = (many - first) / STEPS
    return {**case, "forward_synced_s": synced_s, "forward_issue_s": issue_s, "forward_launches": kernels["launches"],
            "forward_busy_s": kernels["busy_us"] / 1e6, "generate_step_s": generate_step_s,
            "generate_overhead_s": generate_step_s - synced_s}


def main() -> None:
    cases_path, out_path = sys.argv[1], sys.argv[2]
    with open(out_path, "w") as out:
        out.write(json.dumps({"environment": _host(), "host_reference": host_reference()}) + "\n")
        for case in json.load(open(cases_path)):
            try:
                row = run_case(case)
            except Exception as exc:
                row = {**case, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            torch.cuda.empty_cache()
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
