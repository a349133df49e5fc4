"""``autotune scenario``: run a named scenario (the seed experiment) and print or write its comparison."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]

SCENARIOS = ("seed-experiment",)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("scenario", help="run a named scenario (seed-experiment)",
                                   description="Evaluate the plans of a named scenario and compare them. "
                                               "seed-experiment: seed 004's 16-layer dense model on 16 H100, "
                                               "TP8 x PP2 vs layer-wise PP16, prefill and decode.")
    parser.add_argument("name", help="scenario name: " + ", ".join(SCENARIOS))
    parser.add_argument("--plan", action="append", default=[], metavar="NAME=PLAN.json",
                        help="also evaluate this plan file (e.g. the searched plan); repeatable")
    parser.add_argument("--out", default=None, help="write the comparison (Markdown, or JSON with --json) to this file")
    parser.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    parser.add_argument("--no-search", action="store_true", help="skip the searched plan (the stage DP + Optuna search per reading)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from autotune.errors import require, require_choice
    from autotune.plan.io import atomic_write_text, read_plan
    from autotune.scenarios.seed_experiment import comparison_dict, format_markdown, seed_comparison

    from autotune.plan.io import check_output_path

    require_choice("scenario", args.name, SCENARIOS)
    if args.out:
        check_output_path(args.out)
    extra = {}
    for item in args.plan:
        name, sep, path = item.partition("=")
        require(bool(sep and name and path), "--plan", f"expects NAME=PLAN.json, got {item!r}")
        extra[name] = read_plan(path)
    result = seed_comparison(extra, include_searched=not args.no_search)
    text = json.dumps(comparison_dict(result), indent=2) if args.json else format_markdown(result)
    if args.out:
        atomic_write_text(Path(args.out), text + "\n")
    print(text)
    return 0
