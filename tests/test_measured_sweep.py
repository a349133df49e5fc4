"""cost/measured_sweep.py: the measured size sweep behind NCCL's tables (serving_nccl.py) and the engines' own
all-reduce tables (serving_custom_ar.py): it refuses a malformed sweep, interpolates in bytes, and says which
sizes it covers."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.measured_sweep import SizeSweep, sweep_fields
from autotune.cost.serving_custom_ar import engine_tables
from autotune.cost.serving_nccl import NcclTable, nccl_tables
from autotune.errors import AutotuneError


def _sweep(nbytes, seconds):
    return SizeSweep(label="test", **sweep_fields("4", {"bytes": nbytes, "seconds": seconds}), source="made up")


@pytest.mark.parametrize("nbytes, seconds", [([1024], [5e-6]),  # one size
                                             ([1024, 2048], [5e-6]),  # a time missing
                                             ([2048, 1024], [5e-6, 6e-6]),  # sizes not increasing
                                             ([1024, 2048], [5e-6, 0.0]),  # a time not positive
                                             ([1024, 2048], [5e-6, float("nan")])])
def test_a_malformed_sweep_is_refused_naming_its_table(nbytes, seconds):
    with pytest.raises(AutotuneError, match="test.gpus.4"):
        _sweep(nbytes, seconds)


def test_a_straight_line_between_sizes_and_the_end_times_outside():
    sweep = _sweep([1024, 2048, 4096], [4e-6, 6e-6, 10e-6])
    assert sweep.gpus == 4 and sweep.nbytes == (1024.0, 2048.0, 4096.0)
    at = np.array([512.0, 1024.0, 1536.0, 3072.0, 4096.0, 8192.0])
    np.testing.assert_allclose(sweep.time_s(at), [4e-6, 4e-6, 5e-6, 8e-6, 10e-6, 10e-6])
    np.testing.assert_array_equal(sweep.covers(at), [False, True, True, True, True, False])


def test_both_shipped_kinds_of_table_are_size_sweeps():
    assert all(type(t) is NcclTable and isinstance(t, SizeSweep) for t in nccl_tables("all_gather").values())
    assert engine_tables() and all(type(t) is SizeSweep for t in engine_tables().values())
