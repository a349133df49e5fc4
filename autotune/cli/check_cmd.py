"""``autotune check-published``: predicted vs published step times (Calculon-style validation)."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]

SHIPPED = ("published_runs.csv", "modern_runs.csv", "added_runs.csv")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check-published", help="compare predictions with published training runs",
                                   description="Predict each run of published-runs CSVs and print the errors by "
                                               "regime (device, dense/moe, precision, framework).")
    parser.add_argument("runs", nargs="*", default=None,
                        help="CSVs with the columns of tests/data/published_runs.csv or modern_runs.csv, or serving "
                             "CSVs with those of tests/data/serving_runs.csv (default: the shipped training ones)")
    parser.add_argument("--serving", action="store_true",
                        help="check the shipped serving runs (tests/data/serving_runs.csv) instead")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs-detail", action="store_true", help="print every run, not only the regimes")
    parser.add_argument("--assumptions", action="store_true",
                        help="print the runtime presets and the defaults assumed for empty cells, then exit")
    parser.set_defaults(func=run)


def _assumptions() -> None:
    from autotune.calibrate.modern import FRAMEWORK_DEFAULTS
    from autotune.spec.runtime import load_runtime, runtime_names

    print("runtime presets (each row is priced by its framework's, plus what its cells state):")
    for name in runtime_names():
        runtime = load_runtime(name)
        print(f"{name}: {runtime.description}")
        for setting, source in runtime.sources:
            value = runtime
            for part in setting.split("."):  # serving engines' settings are nested (serving.engine, ...)
                value = getattr(value, part)
            print(f"  {setting:28s} {value!r}  ({source})")
    print("\nrow cells and recipes (where a row's cell is empty):")
    for framework, rows in FRAMEWORK_DEFAULTS.items():
        print(f"{framework}:")
        for setting, value, reason in rows:
            print(f"  {setting:28s} {value}  ({reason})")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.calibrate.serving_published import is_serving_csv

    if args.assumptions:
        _assumptions()
        return 0
    data = Path(__file__).resolve().parents[2] / "tests" / "data"
    paths = args.runs or ([data / "serving_runs.csv"] if args.serving else [data / name for name in SHIPPED])
    if any(is_serving_csv(p) for p in paths):
        return _run_serving(args, paths)
    return _run_training(args, paths)


def _run_training(args: argparse.Namespace, paths: list) -> int:
    """Training CSVs: each row's predicted step time against its published one, by regime and file."""
    from pathlib import Path

    from autotune.calibrate.published import check_published
    from autotune.calibrate.regimes import errors_by_regime, overall_error
    from autotune.cli.common import print_json
    from autotune.errors import AutotuneError

    checks, skipped, by_file = [], [], {}
    for path in paths:
        got, left = check_published(path)
        checks += got
        skipped += left
        by_file[Path(path).name] = got
    if not checks:  # every row unpriced: say why, not an error summary of nothing
        reasons = sorted({f"{s.run_id}: {s.reason}" for s in skipped})
        raise AutotuneError("runs", f"no row of {', '.join(map(str, args.runs or paths))} could be priced "
                                    f"({len(skipped)} not expressible; {'; '.join(reasons[:2])[:300]})")
    regimes = errors_by_regime(checks)
    total = overall_error(checks)
    groups = _groups(by_file, checks)
    if args.json:
        print_json({"runs": [{"id": c.run.run_id, "regime": c.run.regime, "published_iter_s": c.run.iter_s,
                              "predicted_step_time_s": c.estimate.step_time_s, "error": c.error} for c in checks],
                    "regimes": [vars(r) for r in regimes], "groups": [vars(g) for g in groups],
                    "not_expressible": [vars(s) for s in skipped],
                    "mean_abs_error": total.mean_abs_error, "max_abs_error": total.worst_abs_error})
        return 0
    _print_training(checks, skipped, regimes + groups + [total], detail=args.runs_detail)
    return 0


def _print_training(checks: list, skipped: list, summaries: list, *, detail: bool) -> None:
    """The training check as text: each row with ``detail``, then each regime's, group's and (last)
    the overall error, and the rows that could not be expressed."""
    if detail:
        print(f"{'run':15s} {'published':>10s} {'predicted':>10s} {'error':>8s}")
        for c in checks:
            print(f"{c.run.run_id:15s} {c.run.iter_s:10.3f} {c.estimate.step_time_s:10.3f} {100 * c.error:+7.1f}%")
    print(f"{'regime (device | arch | precision | framework)':58s} {'n':>3s} {'mean':>7s} {'bias':>7s} {'worst':>7s}")
    for r in summaries:
        print(f"{r.regime:58s} {r.num_runs:3d} {100 * r.mean_abs_error:6.1f}% {100 * r.mean_signed_error:+6.1f}% "
              f"{100 * r.worst_abs_error:6.1f}% ({r.worst_run})")
    if skipped:
        print(f"not expressible: {len(skipped)} rows")
        reasons: dict[str, list[str]] = {}
        for s in skipped:
            reasons.setdefault(s.reason, []).append(s.run_id)
        for reason, ids in reasons.items():
            print(f"  {len(ids):3d}  {reason} ({', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''})")
    total = summaries[-1]
    print(f"mean absolute error {100 * total.mean_abs_error:.1f}%, worst {100 * total.worst_abs_error:.1f}% "
          f"({total.num_runs} rows)")


def _run_serving(args: argparse.Namespace, paths: list) -> int:
    """Serving CSVs (one kind per call: serving and training rows are different checks)."""
    from autotune.calibrate.serving_published import is_serving_csv
    from autotune.cli.check_serving import print_serving, serving_report
    from autotune.cli.common import print_json
    from autotune.errors import AutotuneError

    if not all(is_serving_csv(p) for p in paths):
        raise AutotuneError("runs", "give serving CSVs (serving_runs.csv's columns) or training CSVs, not both at once")
    report = serving_report(paths)
    if args.json:
        print_json({k: v for k, v in report.items() if not k.startswith("_")})
        return 0
    print_serving(report, detail=args.runs_detail)
    return 0


def _groups(by_file: dict, checks: list) -> list:
    """Errors of each file's rows and of the dense and the MoE rows (what the README's
    accuracy section quotes), where there is more than one of a kind."""
    from dataclasses import replace

    from autotune.calibrate.regimes import overall_error

    groups = [replace(overall_error(got), regime=f"file {name}") for name, got in by_file.items() if got]
    if len(groups) < 2:
        groups = []
    for arch in ("dense", "moe"):
        rows = [c for c in checks if c.run.regime.split(" | ")[1:2] == [arch]]
        if rows and len(rows) < len(checks):
            groups.append(replace(overall_error(rows), regime=f"all {arch} rows"))
    return groups
