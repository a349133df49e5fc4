"""The kernels one training step launches on a GPU, in order, with their times (issue 27).

For autotune's reference model (a plan file, run as ``autotune validate --device cuda`` runs it:
one rank, bf16 autocast over fp32 weights, fused AdamW, SDPA) and for Hugging Face transformers
models (trained as scripts/hf_bench.py trains them), two warm steps run under torch.profiler and
this writes one JSON: per case, the step's wall time, the time at least one kernel ran (the rest
is the GPU waiting for the host), every kernel of the last step in launch order (name, start and
duration in microseconds) and a summary by kernel name. Compare it with autotune's operator
stream (autotune/data/opstreams) to see which operators launch which kernels.

    python scripts/gpu_trace.py OUT.json --plan tests/data/h200/plans/a-gpt13-mb8-none.json \
        --hf tests/data/h200/hf/llama-3.2-1b.json:4:2048
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _kernels(prof) -> list[dict]:
    """Every GPU activity (kernels, copies, sets) of the profiled window, in start order."""
    rows = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != torch.autograd.DeviceType.CUDA or e.is_user_annotation():
            continue  # a GPU user annotation (Optimizer.step#AdamW.step) spans kernels listed on their own
        rows.append({"name": e.name(), "start_us": e.start_ns() / 1e3, "dur_us": e.duration_ns() / 1e3})
    rows.sort(key=lambda r: r["start_us"])
    return rows


def _busy_us(rows: list[dict]) -> float:
    """The time at least one GPU activity ran (the union of their intervals)."""
    busy, end = 0.0, -1.0
    for r in rows:
        a, b = r["start_us"], r["start_us"] + r["dur_us"]
        if b <= end:
            continue
        busy += b - max(a, end)
        end = b
    return busy


def _summary(rows: list[dict]) -> list[dict]:
    by_name: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_name[r["name"]].append(r["dur_us"])
    out = [{"name": k, "count": len(v), "total_us": sum(v)} for k, v in by_name.items()]
    return sorted(out, key=lambda r: -r["total_us"])


def _profiled(step, warmup: int = 3) -> dict:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    wall_plain_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t1 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall_profiled_s = time.perf_counter() - t1
    rows = _kernels(prof)
    span = rows[-1]["start_us"] + rows[-1]["dur_us"] - rows[0]["start_us"] if rows else 0.0
    t_first = rows[0]["start_us"] if rows else 0.0
    for r in rows:
        r["start_us"] = round(r["start_us"] - t_first, 2)
        r["dur_us"] = round(r["dur_us"], 2)
    return {"wall_unprofiled_s": wall_plain_s, "wall_profiled_s": wall_profiled_s, "kernel_span_us": span,
            "busy_us": _busy_us(rows), "kernel_sum_us": sum(r["dur_us"] for r in rows), "launches": len(rows),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(), "summary": _summary(rows), "kernels": rows}


def _plan_case(path: str) -> dict:
    import torch.distributed as dist

    from autotune.validate.job import RunConfig
    from autotune.validate.runner import read_case
    from autotune.validate.train import build_trainer

    model, workload, plan = read_case(path)
    config = RunConfig(model=model, workload=workload, plan=plan, numerics_steps=1, warmup_steps=0,
                       measured_steps=1, backend="nccl")
    torch.cuda.set_device(0)
    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29611", rank=0, world_size=1)
    trainer = build_trainer(config)
    trainer.set_dropout(True)
    counter = iter(range(10**6))
    return _profiled(lambda: trainer.step(next(counter)))


def _hf_case(spec: str) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM

    config_path, micro_batch, seq_len, *rest = spec.split(":")
    b, s = int(micro_batch), int(seq_len)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_path), dtype=torch.float32,
                                                 attn_implementation="sdpa")
    if rest and rest[0] == "ckpt":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    x = torch.randint(0, model.config.vocab_size, (b, s), device="cuda")

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return _profiled(step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--plan", nargs="*", default=[])
    parser.add_argument("--hf", nargs="*", default=[], help="CONFIG.json:MICRO_BATCH:SEQ_LEN[:ckpt]")
    args = parser.parse_args()
    report = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(), "cases": {}}
    jobs = [(p, _plan_case) for p in args.plan] + [(h, _hf_case) for h in args.hf]
    for name, run in jobs:
        t0 = time.perf_counter()
        try:
            report["cases"][name] = run(name)
        except Exception as err:  # noqa: BLE001 - record and go on to the next case
            traceback.print_exc()
            report["cases"][name] = {"error": f"{type(err).__name__}: {str(err)[:400]}"}
        torch.cuda.empty_cache()
        case = report["cases"][name]
        print(name, f"{time.perf_counter() - t0:.1f} s", {k: case.get(k) for k in ("wall_unprofiled_s", "busy_us", "launches", "error")},
              flush=True)
        Path(args.out).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
