"""The settings an MLPerf system's Server (and Interactive) engine publishes apart from its Offline one.

Reads autotune/data/serving_systems.toml (each value with its config source) and prints, for every
runtime / model / GPU / GPU count with more than one scenario, the settings whose values differ between
the scenarios, so a reader sees which Server rows are priced with settings of their own. Settings the
configs differ in that the model has no mechanism for (gemm_allreduce_plugin, vboost, Python GC, Triton
frontends) are listed in docs/serving.md
("MLPerf Server engines against their Offline ones").

Usage: python scripts/mlperf_scenario_settings.py [--model mixtral-8x7b]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from autotune.calibrate.serving_systems import PublishedSystem, _systems

_ORDER = ("offline", "server", "interactive", "")


def differing(entries: list[PublishedSystem]) -> dict[str, dict[str, object]]:
    """{setting: {scenario: value}} for the settings whose values are not the same in every scenario
    (a setting an entry does not publish reads as None: the engine preset's default)."""
    keys = sorted({k for e in entries for k, _ in e.values})
    table = {k: {e.scenario or "*": e.get(k) for e in entries} for k in keys}
    return {k: v for k, v in table.items() if len({repr(x) for x in v.values()}) > 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="", help="only this model preset")
    args = ap.parse_args()
    groups: dict[tuple, list[PublishedSystem]] = defaultdict(list)
    for s in _systems():
        if not args.model or s.model == args.model:
            groups[(s.runtime, s.model, s.gpu, s.gpus)].append(s)
    for (runtime, model, gpu, gpus), entries in groups.items():
        if len(entries) < 2:
            continue
        entries.sort(key=lambda e: _ORDER.index(e.scenario))
        diff = differing(entries)
        print(f"{runtime} {model} {gpu} x{gpus}: " + ("no setting differs" if not diff else ""))
        for key, by in diff.items():
            print(f"  {key:26s} " + "  ".join(f"{sc}={val}" for sc, val in by.items()))


if __name__ == "__main__":
    main()
