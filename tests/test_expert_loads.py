"""Skewed expert loads and the tile padding they cost an expert-TP MoE layer (cost/expert_loads.py)."""

import numpy as np
import pytest

from autotune.cost.expert_loads import power_law_rows, skewed_row_share
from autotune.cost.expert_tiles import expert_row_share, padded_row_share
from autotune.errors import AutotuneError


@pytest.mark.parametrize("tokens", [4, 16, 300, 2048, 20000])
def test_draw_routes_every_row_once_per_token(tokens):
    u = np.random.default_rng(1).random((4, 256))
    rows = power_law_rows(tokens, 256, 8, 1.01, u)
    assert (rows.sum(axis=1) == tokens * 8).all()
    assert rows.max() <= tokens and rows.min() >= 0


def test_draw_is_skewed():
    """The busiest expert takes several times the mean; many take under a tile."""
    rows = power_law_rows(4096, 256, 8, 1.01, np.random.default_rng(2).random((8, 256)))
    assert (rows.max(axis=1) > 4 * rows.mean(axis=1)).all()
    assert ((rows < 64).mean(axis=1) > 0.5).all()


@pytest.mark.parametrize("experts, tile", [(256, 64), (128, 64), (256, 128)])
def test_skew_pads_more_than_uniform_at_many_rows_an_expert(experts, tile):
    tokens = np.array([4096.0, 8192.0, 16384.0])
    skewed = skewed_row_share(tokens, experts, 8, tile, 1.01)
    assert (skewed > padded_row_share(tokens, experts, 8, tile)).all()
    assert (np.diff(skewed) < 0).all() and (skewed >= 1.0).all()  # the padding thins with more rows


def test_skew_reaches_fewer_experts_at_few_tokens():
    """At 16 tokens the uniform draw reaches ~100 of 256 experts, the skewed one fewer: fewer padded tiles."""
    tokens = np.array([16.0])
    assert skewed_row_share(tokens, 256, 8, 64, 1.01)[0] < padded_row_share(tokens, 256, 8, 64)[0]


def test_expert_row_share_alpha_switches_the_loads():
    tokens = np.array([0.0, 8192.0])
    uniform = expert_row_share(tokens, 256, 8, "fp8")
    skewed = expert_row_share(tokens, 256, 8, "fp8", alpha=1.2)
    assert uniform[0] == skewed[0] == 1.0
    assert skewed[1] > uniform[1]
    trtllm = expert_row_share(tokens, 256, 8, "nvfp4", "trtllm", alpha=1.01)
    assert trtllm[1] > expert_row_share(tokens, 256, 8, "nvfp4", "trtllm")[1]


def test_rejects_a_uniform_alpha():
    with pytest.raises(AutotuneError):
        skewed_row_share(np.array([64.0]), 256, 8, 64, 1.0)


def _one_row_at_a_time(rows, short, cap):
    """The collector's adjustment as it runs it: +1 to the least loaded expert under the cap, or -1 to the most loaded."""
    rows = rows.copy()
    for _ in range(abs(short)):
        if short > 0:
            open_ = np.flatnonzero(rows < cap)
            rows[open_[np.argmin(rows[open_])]] += 1
        else:
            rows[np.argmax(rows)] -= 1
    return rows


def test_levelling_matches_the_collectors_loop():
    from autotune.cost.expert_loads import _level
    rng = np.random.default_rng(5)
    for _ in range(100):
        experts, cap = int(rng.choice([8, 128, 256])), int(rng.integers(1, 200))
        rows = rng.integers(0, cap + 1, experts).astype(float)
        short = int(rng.integers(-int(rows.sum()), experts * cap - int(rows.sum()) + 1))
        assert np.array_equal(np.sort(_level(rows.copy(), short, cap)), np.sort(_one_row_at_a_time(rows, short, cap)))
