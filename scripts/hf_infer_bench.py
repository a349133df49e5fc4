"""Generate with Hugging Face transformers as people do, and record TTFT, TPOT and peak memory.

An independent check of autotune's inference predictions for ``--runtime transformers``: the model
code is transformers', the call is the plain ``model.generate`` (bf16 weights, SDPA, greedy, the
default DynamicCache), random weights from the model's published config (timing does not depend on
the values; every case forces its full output length with ``min_new_tokens``).

Per case: TTFT = wall time of ``generate(max_new_tokens=1)`` (the prefill and the first token);
TPOT = (wall of ``generate(N)`` - wall of ``generate(1)``) / (N - 1); peak allocated and reserved
bytes of the N-token call; and, under torch.profiler, each decode step's kernel launches and the
time at least one kernel ran (the rest of the step the GPU waited for the host).
Usage: python hf_infer_bench.py CASES.json OUT.jsonl [--device cuda|cpu]
CASES.json: [{"name", "config", "batch", "prompt_len", "output_len"}]
"""
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_trace import _busy_us, _kernels, _summary  # noqa: E402  (the same kernel accounting as the training traces)

PROFILED_TOKENS = 9  # generate(9) - generate(1): eight decode steps under the profiler


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _profiled_kernels(fn, device: str) -> dict:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        _sync(device)
    rows = _kernels(prof)
    return {"launches": len(rows), "busy_us": _busy_us(rows), "kernel_sum_us": sum(r["dur_us"] for r in rows),
            "summary": _summary(rows)}


def _per_decode_step(first: dict, many: dict, steps: int) -> dict:
    """Kernel counts and busy time of one decode step: generate(1+steps) less generate(1)."""
    names_first = {r["name"]: r for r in first["summary"]}
    summary = []
    for r in many["summary"]:
        base = names_first.get(r["name"], {"count": 0, "total_us": 0.0})
        count, total = (r["count"] - base["count"]) / steps, (r["total_us"] - base["total_us"]) / steps
        if count > 0:
            summary.append({"name": r["name"], "count": count, "total_us": round(total, 2)})
    return {"launches": (many["launches"] - first["launches"]) / steps,
            "busy_us": (many["busy_us"] - first["busy_us"]) / steps,
            "kernel_sum_us": (many["kernel_sum_us"] - first["kernel_sum_us"]) / steps,
            "summary": sorted(summary, key=lambda r: -r["total_us"])[:40]}


def run_case(case: dict, device: str) -> dict:
    cfg = AutoConfig.from_pretrained(case["config"])
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    b, p, n = case["batch"], case["prompt_len"], case["output_len"]
    x = torch.randint(0, cfg.vocab_size, (b, p), device=device)
    mask = torch.ones_like(x)

    def generate(tokens: int):
        with torch.inference_mode():
            return model.generate(input_ids=x, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                  do_sample=False, pad_token_id=0)

    out = generate(4)  # warm-up: kernels chosen, allocator grown
    assert out.shape[1] == p + 4, out.shape
    ttft_s = _timed(lambda: generate(1), device, 3)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    gen_s = _timed(lambda: generate(n), device, 2)
    peak = ({"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
             "peak_reserved_bytes": torch.cuda.max_memory_reserved()} if device == "cuda" else {})
    first = _profiled_kernels(lambda: generate(1), device)
    many = _profiled_kernels(lambda: generate(PROFILED_TOKENS), device)
    with torch.inference_mode():  # the prefill's forward alone: no mask, no cache, the last position's logits
        forward_s = _timed(lambda: model(input_ids=x, use_cache=False, logits_to_keep=1), device, 3)
    return {**case, "params": n_params, "ttft_s": ttft_s, "generate_s": gen_s, "prefill_forward_s": forward_s,
            "tpot_s": (gen_s - ttft_s) / (n - 1), **peak,
            "prefill_kernels": {**{k: first[k] for k in ("launches", "busy_us", "kernel_sum_us")},
                                "summary": first["summary"][:40]},
            "decode_step_kernels": _per_decode_step(first, many, PROFILED_TOKENS - 1)}


def _host() -> dict:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"host_cpu": cpu, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": __import__("transformers").__version__}


def main() -> None:
    cases_path, out_path = sys.argv[1], sys.argv[2]
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
    with open(out_path, "w") as out:
        out.write(json.dumps({"environment": _host()}) + "\n")
        for case in json.load(open(cases_path)):
            try:
                row = run_case(case, device)
            except Exception as exc:  # one failing case (out of memory) must not lose the others
                row = {**case, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            if device == "cuda":
                torch.cuda.empty_cache()
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps({k: row.get(k) for k in ("name", "ttft_s", "tpot_s", "peak_allocated_bytes", "error")}),
                  flush=True)


if __name__ == "__main__":
    main()
