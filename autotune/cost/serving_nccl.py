"""NCCL's collectives inside one NVLink node as measured, for the serving path: the TP all-reduces, and the
attention-DP exchange's all-gather, reduce-scatter and all-to-all (cost/serving_collectives.py).

autotune/data/nccl_all_reduce.toml and nccl_collectives.toml hold NVIDIA's aiconfigurator nccl-tests sweeps
(scripts/extract_nccl_allreduce.py and extract_nccl_collectives.py write them, each table citing its file, commit
and NCCL version) per cluster preset, op and GPU count; ``bytes`` is the full buffer, as cost/comm.py counts it. Within a table's
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
from autotune.cost.measured_sweep import SizeSweep, sweep_fields
from autotune.errors import require
from autotune.spec.hardware import ClusterSpec

__all__ = ["NcclTable", "nccl_tables", "serving_nccl_s", "serving_nccl_all_reduce_s", "MEASURED_OPS"]

# the ops with a table: all_reduce in nccl_all_reduce.toml, the others in nccl_collectives.toml
MEASURED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass(frozen=True, kw_only=True, eq=False)
class NcclTable(SizeSweep):
    """One measured sweep (SizeSweep) of the collective ``op`` by NCCL ``nccl_version``."""

    nccl_version: str
    op: str = "all_reduce"


@lru_cache(maxsize=4)
def nccl_tables(op: str = "all_reduce") -> dict[tuple[str, int], NcclTable]:
    """Every shipped table of ``op``, keyed by (cluster preset name, GPU count)."""
    require(op in MEASURED_OPS, "nccl op", f"one of {', '.join(MEASURED_OPS)}, got {op!r}")
    name = "nccl_all_reduce.toml" if op == "all_reduce" else "nccl_collectives.toml"
    data = tomllib.loads(resources.files("autotune.data").joinpath(name).read_text())
    tables = {}
    for entry in data.values():
        sweeps = entry["gpus"] if op == "all_reduce" else entry["ops"].get(op, {}).get("gpus", {})
        for gpus, sweep in sweeps.items():
            table = NcclTable(label=f"nccl.{op}", **sweep_fields(gpus, sweep), nccl_version=entry["nccl_version"],
                              source=entry["source"], op=op)
            tables.update({(name, table.gpus): table for name in entry["clusters"]})
    return tables


def serving_nccl_s(op: str, nbytes: np.ndarray, span, cluster: ClusterSpec) -> np.ndarray:
    """NCCL's ``op`` of ``nbytes`` bytes (the full buffer) over ``span``: the cluster's measured table where it has
    one for this group inside one node and the size lies in its range, the alpha-beta formula (comm.py) else."""
    formula = collective_time_s(op, nbytes, span, cluster)
    table = nccl_tables(op).get((cluster.name, span.size))
    if table is None or span.n_inter > 1:
        return formula
    nbytes = np.asarray(nbytes, dtype=float)
    return np.where(table.covers(nbytes), table.time_s(nbytes), formula)


def serving_nccl_all_reduce_s(act: np.ndarray, span, cluster: ClusterSpec) -> np.ndarray:
    """NCCL's all-reduce of ``act`` bytes over ``span`` (serving_nccl_s)."""
    return serving_nccl_s("all_reduce", act, span, cluster)
