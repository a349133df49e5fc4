"""Fit the shipped GPU profiles' ``kernel_efficiency``: one value for all of them, chosen to
minimise the mean absolute step-time error on tests/data/published_runs.csv.

    python scripts/fit_kernel_efficiency.py

Prints the error table at the best value; the data files hold the value it printed.
"""

from __future__ import annotations

from pathlib import Path

from autotune.calibrate import check_runs, load_published_runs
from autotune.spec.hardware_data import load_cluster

RUNS = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_runs.csv"


def errors_at(runs, efficiency: float) -> list[float]:
    clusters = {}
    for name in {r.cluster_name for r in runs}:
        cluster = load_cluster(name)
        clusters[name] = cluster.with_changes(device=cluster.device.with_changes(kernel_efficiency=efficiency))
    return [c.error for c in check_runs(runs, clusters)]


def main() -> None:
    runs = load_published_runs(RUNS)
    grid = [round(0.70 + 0.005 * i, 3) for i in range(61)]
    mae = {eta: sum(abs(e) for e in errors_at(runs, eta)) / len(runs) for eta in grid}
    best = min(mae, key=mae.get)
    errors = errors_at(runs, best)
    print(f"best kernel_efficiency {best}: MAE {100 * mae[best]:.1f}%, worst {100 * max(map(abs, errors)):.1f}%")
    for run, err in zip(runs, errors):
        print(f"  {run.run_id:14s} {100 * err:+6.1f}%")


if __name__ == "__main__":
    main()
