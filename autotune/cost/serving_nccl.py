"""NCCL's all-reduce inside one NVLink node as measured, for the serving path's TP all-reduces.

autotune/data/nccl_all_reduce.toml holds NVIDIA's aiconfigurator nccl-tests sweeps (scripts/extract_nccl_allreduce.py
writes it, each table citing its file, commit and NCCL version) per cluster preset and GPU count. Within a table's
size range the time is interpolated linearly in bytes between the two neighbouring sizes (the sweep doubles the
size a row, and locally the time is latency + bytes / bandwidth); outside it, for group sizes or clusters without
a table, and for groups that leave the node, cost/comm.py's alpha-beta formula applies. Training keeps the formula
(comm.py): this module is for serving steps only.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from autotune.cost.comm import collective_time_s
from autotune.errors import require
from autotune.spec.hardware import ClusterSpec

__all__ = ["NcclTable", "nccl_tables", "serving_nccl_all_reduce_s"]


@dataclass(frozen=True, kw_only=True, eq=False)
class NcclTable:
    """One measured sweep: ``seconds[i]`` for an all-reduce of ``nbytes[i]`` bytes over ``gpus`` GPUs."""

    gpus: int
    nbytes: tuple[float, ...]
    seconds: tuple[float, ...]
    nccl_version: str
    source: str

    def __post_init__(self) -> None:
        where = f"nccl_all_reduce.gpus.{self.gpus}"
        require(len(self.nbytes) >= 2 and len(self.nbytes) == len(self.seconds), where,
                "needs at least two sizes and one time per size")
        require(all(b > a for a, b in zip(self.nbytes, self.nbytes[1:])), f"{where}.bytes", "must increase")
        require(all(np.isfinite(t) and t > 0 for t in self.seconds), f"{where}.seconds", "must be positive seconds")

    def covers(self, nbytes: np.ndarray) -> np.ndarray:
        return (nbytes >= self.nbytes[0]) & (nbytes <= self.nbytes[-1])

    def time_s(self, nbytes: np.ndarray) -> np.ndarray:
        """Interpolated time; only meaningful where :meth:`covers`."""
        return np.interp(nbytes, self.nbytes, self.seconds)


@lru_cache(maxsize=1)
def nccl_tables() -> dict[tuple[str, int], NcclTable]:
    """Every shipped table, keyed by (cluster preset name, GPU count)."""
    data = tomllib.loads(resources.files("autotune.data").joinpath("nccl_all_reduce.toml").read_text())
    tables = {}
    for entry in data.values():
        for gpus, sweep in entry["gpus"].items():
            table = NcclTable(gpus=int(gpus), nbytes=tuple(float(b) for b in sweep["bytes"]),
                              seconds=tuple(float(t) for t in sweep["seconds"]),
                              nccl_version=entry["nccl_version"], source=entry["source"])
            tables.update({(name, table.gpus): table for name in entry["clusters"]})
    return tables


def serving_nccl_all_reduce_s(act: np.ndarray, span, cluster: ClusterSpec) -> np.ndarray:
    """NCCL's all-reduce of ``act`` bytes over ``span``: the cluster's measured table where it has one for
    this group inside one node and the size lies in its range, the alpha-beta formula (comm.py) else."""
    formula = collective_time_s("all_reduce", act, span, cluster)
    table = nccl_tables().get((cluster.name, span.size))
    if table is None or span.n_inter > 1:
        return formula
    act = np.asarray(act, dtype=float)
    return np.where(table.covers(act), table.time_s(act), formula)
