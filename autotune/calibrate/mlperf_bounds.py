"""MLPerf Server's p99 latency bounds for a published row (autotune/data/mlperf_server_bounds.toml).

A closed-division MLPerf Server (or Interactive) result is published only if LoadGen found the run VALID:
its p99 TTFT and p99 TPOT within the benchmark's bounds at the row's target_qps. The row names its
benchmark in the model cell ("Llama-2-70B (MLPerf llama2-70b)", v5.0's "llama2-70b-interactive") and its
scenario in the load cell ("Server scenario", "Interactive scenario").
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

__all__ = ["ServerBounds", "server_bounds"]


@dataclass(frozen=True, kw_only=True)
class ServerBounds:
    """The p99 bounds a VALID run of ``benchmark`` met, in seconds, and where they come from."""

    benchmark: str
    ttft_p99_s: float
    tpot_p99_s: float
    source: str

    def __post_init__(self) -> None:
        if not (self.ttft_p99_s > 0 and self.tpot_p99_s > 0):
            raise ValueError(f"{self.benchmark}: bounds must be positive")


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads(resources.files("autotune.data").joinpath("mlperf_server_bounds.toml").read_text())


def _benchmark(model_cell: str) -> tuple[str, bool] | None:
    """The benchmark a model cell names, '_' read as '.', without its accuracy suffix; and whether its name says interactive."""
    found = re.search(r"\(MLPerf\s+([A-Za-z0-9_.\-]+)\)", model_cell)
    if not found:
        return None
    name = re.sub(r"-99(\.9)?$", "", found.group(1).lower().replace("_", "."))
    interactive = name.endswith("-interactive")
    return name.removesuffix("-interactive"), interactive


def server_bounds(row: dict) -> ServerBounds | None:
    """The bounds of a row's MLPerf Server / Interactive run; None for another load, a model cell naming no
    "(MLPerf <benchmark>)" or one without bounds in the table, or a row its notes call INVALID (the engine is not read)."""
    load_text = row.get("concurrency_or_batch", "")
    named = _benchmark(row.get("model", ""))
    if named is None or not re.search(r"\b(server|interactive)\s+scenario", load_text, re.IGNORECASE):
        return None
    if re.search(r"\bINVALID\b", row.get("notes", "")):
        return None
    benchmark, interactive = named
    scenario = "interactive" if interactive or re.search(r"\binteractive\b", load_text, re.IGNORECASE) else "server"
    limits = _table()["bounds"][scenario].get(benchmark)
    if limits is None:
        return None
    return ServerBounds(benchmark=f"{benchmark} {scenario}", ttft_p99_s=limits["ttft_ms"] / 1e3,
                        tpot_p99_s=limits["tpot_ms"] / 1e3, source=_table()["source"])
