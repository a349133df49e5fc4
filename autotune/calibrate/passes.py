"""The cost model's forward and backward time of a whole model on one device, the figures
``autotune benchmark`` and ``autotune graph`` put next to a measurement."""

from __future__ import annotations

from autotune.cost.compute import block_times
from autotune.graph.table import ModelTables, OpTable
from autotune.spec.hardware import DeviceProfile

__all__ = ["table_pass_s", "model_pass_s"]


def table_pass_s(table: OpTable, device: DeviceProfile, dtype: str, micro_batch: int = 1) -> tuple[float, float]:
    """(forward, backward) seconds of one block for ``micro_batch`` sequences, no parallelism."""
    times = block_times(table, device, dtype, micro_batch, 1, 1, False)
    return float(times.fwd_s), float(times.bwd_s)


def model_pass_s(tables: ModelTables, device: DeviceProfile, dtype: str, micro_batch: int = 1) -> tuple[float, float]:
    """(forward, backward) seconds of the whole model: every layer, the embedding and the head."""
    fwd = bwd = 0.0
    for table, count in ((tables.layer, tables.model.num_layers), (tables.embedding, 1), (tables.head, 1)):
        if table is not None:
            f, b = table_pass_s(table, device, dtype, micro_batch)
            fwd, bwd = fwd + count * f, bwd + count * b
    return fwd, bwd
