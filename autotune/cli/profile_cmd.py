"""``autotune profile``: fit the cost model to this machine, or show a profile's fits."""

from __future__ import annotations

import argparse
import sys

from autotune.cli.common import positive_int

__all__ = ["register", "run"]


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers >= 2, got {text!r}") from None
    if any(n < 2 for n in sizes):
        raise argparse.ArgumentTypeError(f"group sizes must be >= 2, got {text!r}")
    return sizes


# fp8 / fp8_rowwise: e4m3 GEMMs with tensor-wise / row-wise scales (profilers.kernels.FP8_SCALINGS).
_DTYPES = ("fp32", "bf16", "fp16", "fp8", "fp8_rowwise")


def _dtypes(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names or any(n not in _DTYPES for n in names):
        raise argparse.ArgumentTypeError(f"must be comma-separated {', '.join(_DTYPES)}; got {text!r}")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "profile", help="measure this machine and fit the cost model's regressions",
        description="Micro-benchmark GEMMs, attention, memory-bound kernels and collectives on this machine, "
                    "fit the roofline regressions and alpha-beta link model, and write a profile for --profile.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--quick", action="store_true", help="short sweep (about a minute on 2 cores)")
    parser.add_argument("--out", default=None, help="profile JSON to write (default: profile-<device>.json)")
    parser.add_argument("--show", metavar="FILE", default=None, help="print the fits of an existing profile and exit")
    parser.add_argument("--refit", metavar="FILE", default=None,
                        help="fit the measurements kept in an existing profile again (no measuring); writes --out")
    parser.add_argument("--residuals", action="store_true", help="also print every point's residual")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads per worker process (default 1)")
    parser.add_argument("--world-sizes", type=_sizes, default=None,
                        help="collective group sizes, e.g. 2,4 (default: 2 quick, 2,4 full on CPU; all GPUs on CUDA)")
    parser.add_argument("--no-collectives", action="store_true", help="skip the collective benchmarks")
    parser.add_argument("--dtypes", type=_dtypes, default=None,
                        help="compute dtypes to sweep, e.g. fp32,bf16; fp8 and fp8_rowwise sweep FP8 GEMMs only (default: "
                             "fp32,bf16 on CPU; bf16,fp16,fp32 on CUDA, plus fp8,fp8_rowwise on FP8 GPUs)")
    parser.add_argument("--workers-per-node", type=positive_int, default=4,
                        help="CPU: worker processes sharing the machine's memory (default 4)")
    parser.add_argument("--clock", choices=("auto", "wall", "cpu"), default="auto",
                        help="kernel timing clock: wall, or the thread's CPU time (immune to other processes' "
                             "time slices; one CPU thread only); auto = cpu on a 1-thread CPU profile")
    parser.add_argument("--alias", action="append", default=[], help="a short name for the device (repeatable)")
    parser.set_defaults(func=run)


def _options(args: argparse.Namespace):
    """The validated options, the device and its collective backend checked: bad input fails
    here, before anything is measured or printed."""
    import os

    from autotune.errors import AutotuneError, require

    cpus = len(os.sched_getaffinity(0))  # before torch loads: refused at once
    require(args.threads <= cpus, "--threads", f"{args.threads} threads on the {cpus} CPUs this process may use would "
                                               f"only contend; give at most {cpus}")
    from profilers.collectives import backend_problem
    from profilers.measure import ProfileOptions
    from profilers.timing import resolve_device

    try:
        device = resolve_device(args.device)
    except (ValueError, RuntimeError) as err:
        raise AutotuneError("device", f"{args.device!r}: {str(err).splitlines()[0]}") from None
    if device.type == "cpu":
        _check_workers(args.workers_per_node)
    options = ProfileOptions(device=args.device, quick=args.quick, threads=args.threads, dtypes=args.dtypes,
                             world_sizes=() if args.no_collectives else args.world_sizes,
                             workers_per_node=args.workers_per_node, aliases=tuple(args.alias), clock=args.clock)
    options.kernel_clock(device)
    problem = None if args.no_collectives else backend_problem("nccl" if device.type == "cuda" else "gloo")
    if problem:
        raise AutotuneError("backend", problem)
    return options


def _check_workers(workers: int) -> None:
    """Each CPU worker holds at least a process with torch loaded (its reserved memory): more
    than the machine's memory holds is refused before anything is measured (else the profile is
    refused after minutes, its memory per worker below the reserved)."""
    from autotune.errors import require
    from profilers.measure import _meminfo_bytes, _rss_bytes

    most = max(1, int(_meminfo_bytes("MemTotal") // _rss_bytes()))
    require(workers <= most, "--workers-per-node", f"{workers} workers cannot share this machine's memory: each holds "
            f"at least the {_rss_bytes() / 2**30:.2f} GiB of a process with torch loaded; give at most {most}")


def _measure(options) -> object:
    from autotune.errors import AutotuneError
    from profilers.collectives import BackendError
    from profilers.measure import measure_profile

    try:
        return measure_profile(options, lambda text: sys.stderr.write(f"  {text}\n"))
    except BackendError as err:
        raise AutotuneError("backend", f"{err}") from None


def run(args: argparse.Namespace) -> int:
    from autotune.calibrate.fit_report import format_fit_report
    from autotune.spec.hardware_data import load_profile

    if args.show:
        from autotune.errors import require

        require(not (args.out or args.refit), "show", "--show prints a profile and writes nothing; drop --out/--refit")
        shown = load_profile(args.show)  # every kept field checked (autotune.spec.profile_fields)
        print(format_fit_report(shown, residuals=args.residuals))
        return 0
    from autotune.calibrate.profile_io import build_profile, write_profile
    from autotune.plan.io import check_output_path

    check_output_path(args.out or args.refit or f"profile-{args.device.replace(':', '')}.json")  # before measuring
    if not args.refit:  # --show and --refit only read a profile; measuring one runs torch
        from autotune.cli.common import require_torch

        require_torch("profile")
    if args.refit:
        from autotune.calibrate.profile_io import profile_data

        out = args.out or args.refit
        profile = build_profile(profile_data(load_profile(args.refit)))
    else:
        options = _options(args)
        out = args.out or f"profile-{args.device.replace(':', '')}.json"
        sys.stderr.write(f"profiling {args.device} ({'quick' if args.quick else 'full'} sweep)...\n")
        profile = build_profile(_measure(options))
    write_profile(out, profile)
    print(format_fit_report(profile, residuals=args.residuals))
    print(f"wrote {out}; use it with --profile {out}")
    return 0
