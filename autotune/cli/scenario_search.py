"""Standalone search spaces (a space file whose `kind` names a scenario, not parallel plans):
``autotune search --space cxl-lora`` solves seed 000's GPU + CXL LoRA problem (autotune/scenarios/cxl_lora.py)."""

from __future__ import annotations

import argparse

__all__ = ["run_cxl_lora", "STANDALONE_RUNNERS", "STANDALONE_READS"]


def run_cxl_lora(args: argparse.Namespace) -> int:
    """Optuna under constraints (``--method optuna``, checked against exhaustive enumeration when
    the grid is small enough) or the enumeration alone (``--method exhaustive``)."""
    from autotune.scenarios.cxl_lora import (MAX_EXHAUSTIVE_PAIRS, format_solution, parse_overrides, problem_from_space,
                                          solve_cxl_lora, solve_exhaustive)
    from autotune.search.space import load_space

    problem = problem_from_space(load_space(args.space).raw_dict, parse_overrides(args.set))
    solutions = []
    if args.method == "optuna":
        solutions.append(solve_cxl_lora(problem, seed=args.seed, storage=args.storage, study_name=args.study))
    if args.method == "exhaustive" or len(problem.grid) ** 2 <= MAX_EXHAUSTIVE_PAIRS:
        solutions.append(solve_exhaustive(problem))
    print(format_solution(problem, solutions, as_json=args.json))
    return 0


# Space kinds (the ``kind`` key of a space file) that are standalone scenarios, not parallel plans.
STANDALONE_RUNNERS = {"cxl-lora": run_cxl_lora}
# The search flags a standalone scenario reads (run_cxl_lora); any other one given is refused
STANDALONE_READS = ("space", "set", "method", "seed", "storage", "study", "json")
