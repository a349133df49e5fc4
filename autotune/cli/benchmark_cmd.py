"""``autotune benchmark``: time the real torch transformer and print the cost model's
prediction for the same device next to it."""

from __future__ import annotations

import argparse
from typing import Any

from autotune.cli.common import count, fmt_bytes, fmt_s, positive_int, print_json

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "benchmark", help="time forward and backward of the real model; compare with the cost model",
        description="Time the reference transformer of a preset (5 warm-up, 10 measured steps, mean and "
                    "standard deviation, as seed 002) with its peak memory, next to the cost model's prediction.")
    parser.add_argument("--model", required=True, help="preset name or Hugging Face config.json")
    parser.add_argument("--dtype", default="fp32", help="fp32, or bf16/fp16 under autocast (fp32 weights)")
    parser.add_argument("--backward", action="store_true", help="also time forward + backward")
    parser.add_argument("--batch", type=count("batch"), default=1, help="sequences per step (default 1)")
    parser.add_argument("--seq-len", type=count("seq_len"), default=None, help="tokens per sequence (preset default)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1, as a worker)")
    parser.add_argument("--warmup", type=count(least=0), default=5, help="warm-up steps (default 5)")
    parser.add_argument("--steps", type=positive_int, default=10, help="measured steps (default 10)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall clock (seed 002), or the thread's CPU time (one CPU thread; leaves out other "
                             "processes' time slices on a shared machine)")
    parser.add_argument("--cluster", default=None, help="cluster whose device predicts (default: cpu, or dgx-h100 on cuda)")
    parser.add_argument("--profile", default=None, help="profile JSON replacing the device's fits")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def _rows(data: dict[str, Any]) -> list[str]:
    rows = [f"{'':16s} {'mean':>10s} {'std':>10s} {'predicted':>10s} {'error':>8s}"]
    for key, label in (("forward", "forward"), ("forward_backward", "forward+backward")):
        m = data.get(key)
        if m is None:
            continue
        err = 100 * (m["predicted_s"] / m["mean_s"] - 1)
        rows.append(f"{label:16s} {fmt_s(m['mean_s']):>10s} {fmt_s(m['std_s']):>10s} "
                    f"{fmt_s(m['predicted_s']):>10s} {err:+7.1f}%")
    rows.append(f"peak memory      {fmt_bytes(data['peak_memory_bytes'])} live tensors in a forward+backward step "
                f"({fmt_bytes(data['persistent_bytes'])} parameters and inputs)")
    return rows


def _predicted(args: argparse.Namespace, spec: Any, seq_len: int) -> tuple[Any, tuple[float, float]]:
    """The predicting device and its (forward, backward) seconds for the benchmarked batch."""
    from autotune.spec.resolve import DEFAULT_CLUSTER, resolve_cluster
    from autotune.calibrate.passes import model_pass_s
    from autotune.graph.table import model_tables
    from autotune.spec.workload import bytes_per_element

    cluster = resolve_cluster(args.cluster or (DEFAULT_CLUSTER if args.device.startswith("cuda") else "cpu"), args.profile)
    tables = model_tables(spec, seq_len, bytes_per_element(args.dtype), "flash")
    return cluster.device, model_pass_s(tables, cluster.device, args.dtype, args.batch)


def _check_device(name: str) -> None:
    """cpu, cuda or cuda:N, and present here: refused in one line before anything is built."""
    from autotune.errors import AutotuneError
    from profilers.timing import resolve_device

    try:
        resolve_device(name)
    except ValueError as err:
        raise AutotuneError("device", f"{name!r}: {err}") from None
    except RuntimeError:  # torch.device() of an unknown type
        raise AutotuneError("device", f"{name!r} is not a device type here; use cpu or cuda (cuda:N)") from None


# A benchmark the cost model prices above this is refused up front (fewer --steps, a shorter
# --seq-len or a smaller --batch): the documented CPU example (small, 1 x 512, backward) takes
# about 80 s, a GPU run of gpt3-2.7b 4 x 2048 about 6 s (docs/h100-measured.md).
MAX_BENCHMARK_S = 3600.0


def _check_size(args: argparse.Namespace, spec: Any, seq_len: int, pass_s: tuple[float, float]) -> None:
    """The run the flags ask for is refused up front, in one line stating the bound, where the
    model is too long for it, its tensors would not fit the memory here, or the cost model
    prices it above MAX_BENCHMARK_S."""
    import os

    from autotune.errors import require
    from autotune.graph.table import model_tables
    from autotune.spec.workload import bytes_per_element

    require(seq_len <= spec.max_seq_len, "--seq-len", f"{seq_len} positions exceed {spec.name}'s maximum sequence "
                                                      f"length {spec.max_seq_len}")
    cpus = len(os.sched_getaffinity(0))
    require(args.threads <= cpus, "--threads", f"{args.threads} threads on the {cpus} CPUs this process may use would "
                                               f"only contend; give at most {cpus}")
    tables = model_tables(spec, seq_len, bytes_per_element(args.dtype), "flash")
    dense, moe = tables.layer_counts()
    saved = dense * float(tables.layer.saved_bytes.sum()) + sum(
        float(t.saved_bytes.sum()) * (moe if t in (tables.moe_layer, tables.experts) else 1)
        for t in (tables.moe_layer, tables.experts, tables.embedding, tables.head) if t is not None)
    # fp32 weights (and their gradients with --backward), and the activations a backward keeps
    weights = tables.num_params * 4.0 * (2 if args.backward else 1)
    need = weights + args.batch * saved
    have, where = _memory_here(args.device)
    require(need <= have, "--model" if weights > have else "--batch" if args.batch > 1 else "--seq-len",
            f"the run needs about {fmt_bytes(need)} of tensors ({spec.name}, {args.batch} x {seq_len} tokens), "
            f"more than the {fmt_bytes(have)} {where}")
    fwd_s, bwd_s = pass_s
    total_s = (args.warmup + args.steps) * (fwd_s + ((fwd_s + bwd_s) if args.backward else 0.0))
    require(total_s <= MAX_BENCHMARK_S, "--warmup" if args.warmup > args.steps else "--steps", f"the cost model prices {args.warmup} + {args.steps} steps at "
            f"{fmt_s(total_s)}, above the {MAX_BENCHMARK_S:.0f} s a benchmark may take; give fewer --steps, "
            "a shorter --seq-len or a smaller --batch")


def _memory_here(device: str) -> tuple[float, str]:
    """(bytes a benchmark may fill, where): free device memory on CUDA, MemAvailable on a CPU."""
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.mem_get_info(torch.device(device))[0]), f"free on {device}"
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024.0, "available in this machine's memory (/proc/meminfo)"
    return float("inf"), ""


def run(args: argparse.Namespace) -> int:
    from autotune.cli.common import require_torch

    require_torch("benchmark")
    from autotune.errors import AutotuneError
    from autotune.spec.presets import default_training_shape, resolve_model

    _check_options(args)
    spec = resolve_model(args.model)  # before torch loads: a bad model is refused at once
    seq_len = args.seq_len or default_training_shape(spec)[1]
    if args.device.startswith("cuda"):
        _check_device(args.device)  # the size check reads the device's free memory
    device, (fwd_s, bwd_s) = _predicted(args, spec, seq_len)
    _check_size(args, spec, seq_len, (fwd_s, bwd_s))  # before torch loads on a CPU: a refusal comes at once
    _check_device(args.device)
    from profilers.benchmark import benchmark_model

    try:
        result = benchmark_model(spec, batch=args.batch, seq_len=seq_len, dtype=args.dtype, backward=args.backward,
                                 device=args.device, warmup=args.warmup, steps=args.steps, threads=args.threads,
                                 clock=args.clock)
    except ValueError as err:
        raise AutotuneError("device", f"{args.device!r}: {err}") from None
    timing = lambda t, pred: {"mean_s": t.mean_s, "std_s": t.std_s, "predicted_s": pred}  # noqa: E731
    data: dict[str, Any] = {
        "model": spec.name, "device": args.device, "predicted_on": device.name, "dtype": args.dtype,
        "batch": args.batch, "seq_len": seq_len, "threads": args.threads, "warmup": args.warmup, "steps": args.steps,
        "clock": args.clock,
        "forward": timing(result.forward, fwd_s),
        "forward_backward": timing(result.forward_backward, fwd_s + bwd_s) if result.forward_backward else None,
        "peak_memory_bytes": result.peak_memory_bytes, "persistent_bytes": result.persistent_bytes,
    }
    _print(args, data, seq_len)
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """The dtype, warm-up and clock flags, before the model is read."""
    from autotune.errors import require, require_choice
    from autotune.spec.workload import DTYPES

    require_choice("dtype", args.dtype, DTYPES)
    require(args.warmup >= 0, "--warmup", "must be >= 0")
    require(args.clock == "wall" or (args.device == "cpu" and args.threads == 1), "--clock",
            "cpu times one CPU thread; use wall with --threads > 1 or on CUDA")


def _print(args: argparse.Namespace, data: dict[str, Any], seq_len: int) -> None:
    """The measured and predicted times as JSON (--json) or as a header line and a table."""
    if args.json:
        print_json(data)
        return
    print(f"benchmark {data['model']} on {args.device} ({args.dtype}, {args.batch} x {seq_len} tokens, {args.threads} "
          f"thread(s); {args.warmup} warm-up, {args.steps} measured steps, {args.clock} clock); predicted on "
          f"{data['predicted_on']}")
    print("\n".join(_rows(data)))
