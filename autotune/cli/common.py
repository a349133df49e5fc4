"""Arguments and printing shared by commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from autotune.cost.memory import TENSOR_BYTES_UNCERTAINTY
from autotune.spec.resolve import DEFAULT_CLUSTER

__all__ = ["count", "number", "add_model_args", "add_workload_args", "add_degree_args", "resolve_dtype", "print_json", "fmt_bytes", "fmt_s",
           "estimate_table", "parser_defaults", "refuse_given", "require_torch", "TORCH_CPU_INSTALL"]

# PyTorch's own index of CPU-only wheels: PyPI's Linux torch wheel pulls several GB of CUDA libraries.
TORCH_CPU_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def count(limit: str | None = None, *, least: int = 1):
    """An argparse type: a whole number >= ``least``, at most spec/limits.py's ``LIMITS[limit]``
    (the error states the bound and why)."""
    def parse(text: str) -> int:
        from autotune.spec.limits import LIMITS

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {least}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {least}, got {text!r}")
        if limit is not None and value > LIMITS[limit][0]:
            most, why = LIMITS[limit]
            raise argparse.ArgumentTypeError(f"{value:,} is beyond any real input: at most {most:,} {why}")
        return value
    parse.__name__ = "count"  # argparse names the type in its messages
    return parse


def number(least: float, most: float, why: str):
    """An argparse type: a finite number from ``least`` to ``most`` (``why`` says why not more)."""
    def parse(text: str) -> float:
        import math

        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value) or not least <= value <= most:
            raise argparse.ArgumentTypeError(f"must be a finite number from {least:g} to {most:g} ({why}), got {text!r}")
        return value
    parse.__name__ = "number"
    return parse


def add_model_args(parser: argparse.ArgumentParser, *, gpus_required: bool = True, model_required: bool = True) -> None:
    parser.add_argument("--model", required=model_required, help="preset name (e.g. large, gpt3-175b, llama3-70b) or path to a Hugging Face config.json")
    parser.add_argument("--gpus", type=positive_int, required=gpus_required, help="number of GPUs")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help="cluster preset (dgx-a100-80gb, dgx-a100-40gb, dgx-h100, dgx-h200, dgx-h100-cxl, dgx-b200, "
                             "gb200-nvl72, grand-teton-h100, dgx-2, dgx-1-v100[-16gb], cpu) or a cluster file")
    parser.add_argument("--profile", default=None, help="profile JSON from `autotune profile` replacing the device's fits")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--global-batch", type=positive_int, default=None, help="sequences per step (preset default)")
    parser.add_argument("--seq-len", type=positive_int, default=None, help="tokens per sequence (preset default)")
    parser.add_argument("--dtype", default=None,
                        help="fp32, or mixed precision bf16/fp16 (fp32 master weights); fp8 (FP8 GEMMs, bf16 elsewhere), "
                             "fp8_rowwise, mxfp8 or nvfp4 (Blackwell); default bf16, or fp32 on a device whose profile has no bf16 "
                             "GEMM fit (CPUs)")
    parser.add_argument("--fp8-all-gather", action="store_true",
                        help="with --dtype fp8/mxfp8: FSDP gathers FP8 weights (torchao enable_fsdp_float8_all_gather)")
    parser.add_argument("--attention", default=None, help="default: the runtime's; flash (fused kernel), unfused (scores in memory, pre-2022 Megatron) or "
                        "unfused_eager_mask (also scale and causal mask as eager kernels, Megatron-LM 2019)")


def add_degree_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tp", type=count("gpus"), default=1, help="tensor-parallel degree")
    parser.add_argument("--pp", type=count("gpus"), default=1, help="pipeline stages")
    parser.add_argument("--dp", type=count("gpus"), default=None, help="data-parallel degree (default: the rest)")
    parser.add_argument("--cp", type=count("gpus"), default=1, help="context-parallel degree")
    parser.add_argument("--vpp", type=count("num_layers"), default=None,
                        help="virtual stages per pipeline rank (interleaved 1F1B); default: the runtime's (1 for most)")
    parser.add_argument("--schedule", default=None, help="pipeline schedule: 1f1b (default), gpipe, or interleaved (with --vpp > 1)")
    parser.add_argument("--micro-batch", type=count("global_batch"), default=None,
                        help="sequences per micro-batch per data-parallel replica; default: 1, or the local batch over "
                             "pp micro-batches where the runtime splits it so (torchtitan)")
    parser.add_argument("--recompute", default="none", help="activation recomputation: none, selective or full")
    parser.add_argument("--recompute-layers", type=count("num_layers", least=0), default=0,
                        help="with --recompute full: recompute only the first N layers of each stage, as "
                             "Megatron's block method (0: every layer)")
    sp = parser.add_mutually_exclusive_group()
    sp.add_argument("--sequence-parallel", dest="sequence_parallel", action="store_true", default=None,
                    help="sequence parallelism (default: on when tp > 1)")
    sp.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false")
    parser.add_argument("--zero", type=int, default=None,
                        help="ZeRO stage 0-3 (1 = distributed optimizer, 3 = FSDP); default: the runtime's (megatron 1, "
                             "torchtitan and llm-foundry 3, `autotune runtimes`)")
    overlap = parser.add_mutually_exclusive_group()
    overlap.add_argument("--overlap-tp-comm", action="store_true", default=None,
                         help="overlap TP collectives with GEMMs (Megatron --tp-comm-overlap); default: the runtime's")
    overlap.add_argument("--no-overlap-tp-comm", dest="overlap_tp_comm", action="store_false",
                         help="TP collectives not overlapped, where the runtime would")
    parser.add_argument("--no-overlap-grad-reduce", action="store_true", help="gradient sync after the backward pass, not overlapped")
    parser.add_argument("--ep", type=count("gpus"), default=1, help="expert-parallel degree (MoE; divides the experts)")
    parser.add_argument("--etp", type=count("gpus"), default=1, help="tensor-parallel degree inside each expert (MoE)")


def parser_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Each option's default, by its destination (to tell which options were given)."""
    defaults: dict[str, Any] = {}
    for action in parser._actions:  # the first action of a destination sets its default, as argparse does
        if action.dest != "help":
            defaults.setdefault(action.dest, action.default)
    return defaults


def refuse_given(args: argparse.Namespace, defaults: dict[str, Any], dests: tuple[str, ...], why: str) -> None:
    """Options that would be silently ignored are refused: each of ``dests`` must keep its default."""
    from autotune.errors import AutotuneError

    for dest in dests:
        if dest in defaults and getattr(args, dest, defaults[dest]) != defaults[dest]:
            raise AutotuneError(dest, f"--{dest.replace('_', '-')} {why}; drop it")


def require_torch(command: str) -> None:
    """validate, profile, graph and benchmark run PyTorch; the base install (search, evaluate,
    curve, export, check-published) has none, so its absence is one line (exit 2) saying how to
    install the CPU wheel."""
    from autotune.errors import AutotuneError

    try:
        import torch  # noqa: F401
    except ImportError as err:
        raise AutotuneError("torch", f"autotune {command} runs PyTorch, which is not importable here ({err}); install "
                                     f"the CPU wheel with `{TORCH_CPU_INSTALL}` (search, evaluate, curve, export and "
                                     "check-published need no torch)") from None


def resolve_dtype(args: argparse.Namespace) -> str:
    """--dtype, or its default: bf16 where the device has a bf16 GEMM fit, fp16 on a GPU with
    FP16 tensor cores only (Volta), else fp32 (a CPU profile refuses bf16 fits whose throughput
    depends on layout; see docs/profiling.md)."""
    if args.dtype is not None:
        return args.dtype
    from autotune.spec.resolve import resolve_cluster
    from autotune.errors import AutotuneError

    device = resolve_cluster(args.cluster, getattr(args, "profile", None)).device  # its errors are the user's
    try:
        device.regression("gemm", "bf16")
    except AutotuneError:
        return "fp16" if device.kind == "gpu" and ("gemm", "fp16") in device.compute else "fp32"
    return "bf16"


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def fmt_bytes(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def fmt_s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def estimate_table(estimate: Any, workload: Any = None) -> str:
    """A readable summary of an Estimate; an inference estimate's in serving terms (TPS, TPOT and
    TTFT against ``workload``'s targets, the KV cache), without MFU."""
    e = estimate
    if e.inference is not None:
        from autotune.outputs.serving_report import inference_head_lines

        lines = inference_head_lines(e, workload)
    else:
        lines = [f"step time      {fmt_s(e.step_time_s)}  (+-{e.uncertainty_pct:.0f}%)",
                 f"throughput     {e.tokens_per_s:,.0f} tokens/s",
                 f"model TFLOP/s  {e.tflops_per_gpu:.1f} per GPU   MFU {100 * e.mfu:.1f}%"]
    lines += [f"memory         {fmt_bytes(e.peak_memory_bytes_per_gpu)} of {fmt_bytes(e.memory_capacity_bytes)} per GPU"
              + ("" if e.fits else "   DOES NOT FIT")
              + (f"   within the +-{100 * TENSOR_BYTES_UNCERTAINTY:.0f}% uncertainty of its tensors' bytes of the limit"
                 if e.memory_at_risk else ""),
              "time breakdown:"]
    lines += [f"  {k[:-2]:18s} {fmt_s(v):>10s}  {100 * v / e.step_time_s:5.1f}%" for k, v in e.breakdown.items() if v > 0]
    lines.append("memory breakdown (peak stage):")
    names = {"activations_bytes": "kv_cache+activations"} if e.inference is not None else {}
    lines += [f"  {names.get(k, k[:-6]):22s} {fmt_bytes(v):>11s}" for k, v in e.memory_breakdown.items() if v > 0]
    if not e.fits:
        lines.append(f"does not fit: {e.reason}")
    return "\n".join(lines)
