"""``autotune graph``: trace a torch module (or a preset's reference model) into the cost
model's operator graph; print its FLOPs, liveness peak memory and the cost model's times."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from autotune.cli.common import count, fmt_s, print_json

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "graph", help="trace a torch module into an operator graph (FLOPs, liveness memory, cost)",
        description="Trace an nn.Module with torch.export on the meta device (no real memory): FLOPs per "
                    "operator, the operator graph the cost model prices, peak memory by liveness analysis.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--module", help="pkg.mod:factory returning an nn.Module or (module, example_args)")
    source.add_argument("--model", help="a preset or config.json: trace the reference transformer")
    parser.add_argument("--input", action="append", default=[], help="example input SHAPE[:DTYPE], e.g. 1x512:int64 (repeatable)")
    parser.add_argument("--batch", type=count("batch"), default=1, help="sequences traced (--model; default 1)")
    parser.add_argument("--seq-len", type=count("seq_len"), default=None, help="tokens per sequence (--model; preset default)")
    parser.add_argument("--device", default="h100", help="device profile that prices the graph (name or profile file)")
    parser.add_argument("--dtype", default="fp32", help="dtype of the traced tensors, for the regressions (default fp32)")
    parser.add_argument("--training", action="store_true",
                        help="--model: also the liveness peak of a forward+backward step (joint graph, no optimizer)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def _analytic(spec: Any, seq_len: int, batch: int, device: Any, dtype: str, act_bytes: int) -> dict[str, float]:
    from autotune.calibrate.passes import model_pass_s
    from autotune.graph.table import model_tables

    tables = model_tables(spec, seq_len, act_bytes, "flash")
    fwd, bwd = model_pass_s(tables, device, dtype, batch)
    return {"model_flops": batch * tables.model_flops_per_sequence() / 3.0, "forward_s": fwd, "backward_s": bwd,
            "num_params": tables.num_params}


def _summary(traced: Any, device: Any, dtype: str) -> dict[str, Any]:
    from autotune.calibrate.passes import table_pass_s
    from autotune.graph.table import OpTable

    fwd, bwd = table_pass_s(OpTable.from_graph(traced.graph), device, dtype)
    live = traced.liveness
    return {"num_operators": len(traced.operators), "kinds": dict(Counter(op.kind for op in traced.operators)),
            "num_params": traced.num_params, "model_flops": traced.model_flops,
            "flops_by_aten_op": traced.flops_by_aten_op, "persistent_bytes": live.persistent_bytes,
            "peak_transient_bytes": live.peak_transient_bytes, "peak_bytes": live.peak_bytes,
            "peak_at": live.peak_step, "device": device.name, "dtype": dtype, "forward_s": fwd, "backward_s": bwd}


def _print(data: dict[str, Any]) -> None:
    mib = 2**20
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(data["kinds"].items(), key=lambda kv: -kv[1]))
    print(f"operators      {data['num_operators']} ({kinds})")
    print(f"parameters     {data['num_params']:,}")
    line = f"forward FLOPs  {data['model_flops'] / 1e9:,.3f} GFLOP"
    if "analytic" in data:
        ref = data["analytic"]["model_flops"]
        line += f"  (analytic graph {ref / 1e9:,.3f} GFLOP, {100 * (data['model_flops'] / ref - 1):+.2f}%)"
    print(line)
    print(f"peak memory    {data['peak_bytes'] / mib:,.1f} MiB = {data['persistent_bytes'] / mib:,.1f} MiB parameters "
          f"and inputs + {data['peak_transient_bytes'] / mib:,.1f} MiB live activations (at {data['peak_at']}) [liveness]")
    if "training" in data:
        t = data["training"]
        print(f"training step  {t['peak_bytes'] / mib:,.1f} MiB = {t['persistent_bytes'] / mib:,.1f} MiB parameters and "
              f"inputs + {t['peak_transient_bytes'] / mib:,.1f} MiB activations and gradients (at {t['peak_at']}) "
              f"[liveness, forward+backward, no optimizer]")
    line = (f"cost model     {data['device']} ({data['dtype']}): forward {fmt_s(data['forward_s'])}, "
            f"backward {fmt_s(data['backward_s'])}")
    if "analytic" in data:
        line += (f"  (analytic graph: forward {fmt_s(data['analytic']['forward_s'])}, "
                 f"backward {fmt_s(data['analytic']['backward_s'])})")
    print(line)


def _check_source_options(args: argparse.Namespace) -> None:
    """Options of the other source are refused, not ignored: --input goes with --module;
    --batch, --seq-len and --training with --model."""
    from autotune.errors import require

    require(not (args.model and args.input), "input",
            "--input gives a --module's example inputs; with --model use --batch and --seq-len")
    if args.module:
        for flag, given in (("--batch", args.batch != 1), ("--seq-len", args.seq_len is not None),
                            ("--training", args.training)):
            require(not given, flag.lstrip("-").replace("-", "_"),
                    f"{flag} shapes the traced --model; a --module's inputs come from --input or its factory")


def run(args: argparse.Namespace) -> int:
    from autotune.cli.common import require_torch

    require_torch("graph")
    from autotune.spec.hardware_data import load_device
    from autotune.spec.presets import default_training_shape, resolve_model
    from autotune.spec.workload import DTYPES, bytes_per_element
    from autotune.errors import require, require_choice

    require_choice("dtype", args.dtype, DTYPES)
    _check_source_options(args)
    device = load_device(args.device)
    spec = resolve_model(args.model) if args.model else None  # before torch loads: refused at once
    seq_len = (args.seq_len or default_training_shape(spec)[1]) if spec else 0
    if spec is not None:
        require(seq_len <= spec.max_seq_len, "--seq-len",
                f"{seq_len} positions exceed {spec.name}'s maximum sequence length {spec.max_seq_len}")
    from profilers.trace_inputs import trace_factory, trace_spec, trace_spec_training

    if args.module:
        traced = trace_factory(args.module, args.input)
        data = _summary(traced, device, args.dtype)
    else:
        traced = trace_spec(spec, args.batch, seq_len)
        data = _summary(traced, device, args.dtype)
        data["analytic"] = _analytic(spec, seq_len, args.batch, device, args.dtype, bytes_per_element(args.dtype))
        if args.training:
            live = trace_spec_training(spec, args.batch, seq_len)
            data["training"] = {"peak_bytes": live.peak_bytes, "persistent_bytes": live.persistent_bytes,
                                "peak_transient_bytes": live.peak_transient_bytes, "peak_at": live.peak_step}
    if args.json:
        print_json(data)
    else:
        _print(data)
    return 0
