"""Floors made for many slices in one pass are each slice's own floors, bit for bit."""

import numpy as np
import pytest

from autotune.search.members import bare_floors, class_member_floors, count_floors, member_floors, screen_floors
from autotune.search.tables import ChoiceCosts


def _times(rng, rows: int, layers: int) -> np.ndarray:
    """[row, n, pos] times growing with n (inf at n = 0, some rows inf at a position)."""
    per_layer = rng.uniform(0.5, 2.0, size=(rows, 1, 4))
    time = per_layer * np.arange(layers + 1)[None, :, None] + rng.uniform(0.0, 0.3, size=(rows, layers + 1, 4))
    time[:, 0] = np.inf
    time[rng.random(rows) < 0.2, :, 1] = np.inf
    return time


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6])
def test_bare_floors_are_each_rows_screen_floors(stages):
    rng = np.random.default_rng(stages)
    layers, rows = 24, 12
    time = _times(rng, rows, layers)
    batches = rng.choice([1, 2, 3, 4, 8, 12, 24], size=rows)
    chunks = rng.choice([1, 2, 3], size=rows)
    plain, inter = bare_floors(time, layers, stages, batches, chunks)
    for r in range(rows):
        zeros = np.zeros_like(time[r:r + 1])
        shape = (layers, stages, int(batches[r]), int(chunks[r]), min(int(batches[r]), stages))
        want = screen_floors(time[r:r + 1], zeros, zeros, np.inf, shape)
        assert plain[r] == want[0][0] and inter[r] == want[1][0]


def _costs(rng, layers: int, scale: float) -> ChoiceCosts:
    time = _times(rng, 2, layers) * scale
    base = rng.uniform(1e9, 4e9, size=time.shape) + 1e8 * np.arange(layers + 1)[None, :, None]
    per = rng.uniform(1e8, 1e9, size=time.shape) * (np.arange(layers + 1)[None, :, None] + 1) / scale
    return ChoiceCosts(choice=None, time_s=time, tail_s=rng.uniform(0, 0.5, size=time.shape), mem_base_bytes=base,
                       mem_per_microbatch_bytes=per)


@pytest.mark.parametrize("side", [None, 0, 1])
def test_class_member_floors_are_one_call_each(side):
    rng = np.random.default_rng(7)
    layers, shape = 24, (24, 4, 8, 2, 4)
    members = [_costs(rng, layers, s) for s in (1.0, 1.2, 1.5)]
    pairs = [(members[0], members[2]), (members[1], members[2])]
    counts = np.array([1, 2, 3, 5, 8])
    plains, inters, by_pair = class_member_floors(members, pairs, counts, 1, 2e10, shape, side)
    want = member_floors(members, 1, 2e10, shape, side)
    np.testing.assert_array_equal(plains, want[0])
    np.testing.assert_array_equal(inters, want[1])
    for (none, full), got in zip(pairs, by_pair):
        one = count_floors(none, full, counts, 1, 2e10, shape, side)
        np.testing.assert_array_equal(got[0], one[0])
        np.testing.assert_array_equal(got[1], one[1])
