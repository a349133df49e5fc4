"""Train Hugging Face transformers models for a few steps and record step time and peak memory.

The script that measured tests/data/h200/runs.json's transformers runs (../shared/reference/gpu/hf_bench.py
of 2026-11-27), kept here so scripts/gpu_check.sh can measure more of them.

An independent check of autotune's single-GPU predictions: the model code is transformers', the
loop is the plain one people write (fp32 master weights, bf16 autocast, fused AdamW, SDPA).
Usage: python hf_bench.py CASES.json OUT.jsonl [--device cuda|cpu]
CASES.json: [{"name", "config", "micro_batch", "seq_len", "checkpointing", "steps", "warmup"}]
"""
import json
import statistics
import sys
import time
import traceback

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def run_case(case, device):
    cfg = AutoConfig.from_pretrained(case["config"])
    kwargs = {"attn_implementation": "sdpa"}
    if case.get("experts_implementation"):
        kwargs["experts_implementation"] = case["experts_implementation"]
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, **kwargs)
        except TypeError:
            kwargs.pop("experts_implementation", None)
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, **kwargs)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    if case.get("checkpointing"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=(device == "cuda"))
    b, s = case["micro_batch"], case["seq_len"]
    x = torch.randint(0, cfg.vocab_size, (b, s), device=device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16)

    def step():
        with amp:
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times = []
    for i in range(case.get("warmup", 3) + case.get("steps", 8)):
        if device == "cuda":
            torch.cuda.synchronize()
            if i == case.get("warmup", 3):
                torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        loss = step()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= case.get("warmup", 3):
            times.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    reserved = torch.cuda.max_memory_reserved() if device == "cuda" else 0
    impl = getattr(model.config, "_experts_implementation", None)
    attn = getattr(model.config, "_attn_implementation", None)
    return {"name": case["name"], "params": n_params, "micro_batch": b, "seq_len": s,
            "checkpointing": bool(case.get("checkpointing")), "step_s_median": statistics.median(times),
            "step_s_min": min(times), "step_s_all": times, "peak_allocated_bytes": peak,
            "peak_reserved_bytes": reserved, "loss": float(loss), "build_s": build_s,
            "experts_impl": str(impl), "attn_impl": str(attn)}


def main():
    cases = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    device = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--device" else "cuda"
    print("torch", torch.__version__, "cuda", torch.version.cuda,
          torch.cuda.get_device_name() if device == "cuda" else "cpu", flush=True)
    for case in cases:
        try:
            rec = run_case(case, device)
        except Exception as err:  # noqa: BLE001 - record and go on
            traceback.print_exc()
            rec = {"name": case["name"], "error": f"{type(err).__name__}: {str(err)[:300]}"}
        if device == "cuda":  # the case's model is gone: return its blocks, so the next peak is its own
            torch.cuda.empty_cache()
        print(json.dumps({k: v for k, v in rec.items() if k != "step_s_all"}), flush=True)
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
