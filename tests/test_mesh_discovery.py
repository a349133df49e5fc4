"""Device-mesh discovery from pairwise latency and bandwidth (autotune.calibrate.mesh_discovery),
on simulated topologies: one machine has only one real level."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.calibrate.mesh_discovery import discover_mesh, link_classes
from autotune.errors import AutotuneError


def topology(dims, latency_s, bandwidth, *, noise=0.0, order=None, seed=0):
    """Pairwise matrices of ranks on a mesh of ``dims`` (innermost first); two ranks talk over
    the outermost dimension in which their coordinates differ. ``order[p]`` is the rank at
    mesh position p (default: identity)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(dims))
    order = list(range(n)) if order is None else list(order)
    coords = {}
    for pos in range(n):
        c, rest = [], pos
        for d in dims:
            c.append(rest % d)
            rest //= d
        coords[order[pos]] = c
    lat, bw = np.zeros((n, n)), np.zeros((n, n))
    for a, b in itertools.combinations(range(n), 2):
        level = max(k for k in range(len(dims)) if coords[a][k] != coords[b][k])
        lat[a, b] = lat[b, a] = latency_s[level] * (1 + noise * rng.uniform(-1, 1))
        bw[a, b] = bw[b, a] = bandwidth[level] * (1 + noise * rng.uniform(-1, 1))
    return lat, bw


def groups_of(discovery, size):
    order = discovery.rank_order
    return {frozenset(order[i:i + size]) for i in range(0, len(order), size)}


def test_two_nodes_of_four_with_interleaved_ranks():
    order = [0, 4, 1, 5, 2, 6, 3, 7]  # node 0 holds ranks 0, 4, 1, 5
    lat, bw = topology((4, 2), (5e-6, 25e-6), (150e9, 12e9), noise=0.1, order=order)
    mesh = discover_mesh(lat, bw)
    assert mesh.shape == (4, 2)
    assert groups_of(mesh, 4) == {frozenset({0, 1, 4, 5}), frozenset({2, 3, 6, 7})}
    inner, outer = mesh.levels
    assert inner.latency_s == pytest.approx(5e-6, rel=0.1) and inner.bandwidth == pytest.approx(150e9, rel=0.1)
    assert outer.latency_s == pytest.approx(25e-6, rel=0.1) and outer.bandwidth == pytest.approx(12e9, rel=0.1)
    assert inner.num_pairs == 2 * 6 and outer.num_pairs == 4 * 4
    assert 0 < inner.spread <= 0.25  # +-10% around a median


def test_three_levels_that_differ_only_in_latency_or_only_in_bandwidth():
    lat, bw = topology((2, 2, 2), (2e-6, 2e-6, 30e-6), (300e9, 60e9, 60e9), noise=0.05)
    mesh = discover_mesh(lat, bw)
    assert mesh.shape == (2, 2, 2)
    assert groups_of(mesh, 2) == {frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}), frozenset({6, 7})}


def test_uniform_links_are_one_dimension():
    lat, bw = topology((4,), (50e-6,), (3e9,), noise=0.2)
    mesh = discover_mesh(lat, bw)
    assert mesh.shape == (4,) and mesh.merged_classes == 0


def test_a_class_that_forms_no_level_is_merged():
    lat, bw = topology((2, 2), (5e-6, 40e-6), (100e9, 5e9))
    lat[0, 2] = lat[2, 0] = 5e-6  # one cross pair as fast as the fast level: {0,1,2} is no clique
    bw[0, 2] = bw[2, 0] = 100e9
    mesh = discover_mesh(lat, bw)
    assert mesh.shape == (4,) and mesh.merged_classes >= 1


def test_single_rank_and_pair():
    assert discover_mesh(np.zeros((1, 1)), np.zeros((1, 1))).shape == (1,)
    mesh = discover_mesh(np.array([[0, 1e-5], [1e-5, 0]]), np.array([[0, 1e9], [1e9, 0]]))
    assert mesh.shape == (2,) and mesh.levels[0].bandwidth == 1e9


@pytest.mark.parametrize("lat, bw, needle", [
    (np.zeros((2, 3)), np.zeros((2, 3)), "n x n"),
    (np.array([[0, -1.0], [-1.0, 0]]), np.ones((2, 2)), "latency"),
    (np.array([[0, 1e-5], [1e-5, 0]]), np.array([[0, np.nan], [np.nan, 0]]), "bandwidth"),
])
def test_bad_matrices_name_the_field(lat, bw, needle):
    with pytest.raises(AutotuneError, match=needle):
        discover_mesh(lat, bw)


def test_link_classes_are_ordered_fastest_first():
    lat, bw = topology((2, 2), (5e-6, 40e-6), (100e9, 5e9))
    classes = link_classes(lat, bw)
    assert classes[0, 1] == 0 and classes[0, 2] == 1 and classes[0, 0] == -1


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.integers(2, 3), min_size=1, max_size=3), seed=st.integers(0, 10_000),
       noise=st.floats(0.0, 0.15))
def test_random_hierarchies_are_recovered(dims, seed, noise):
    """Levels at least 3x apart in latency and bandwidth, ranks in random order, +-15% noise."""
    n = int(np.prod(dims))
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    lat = [2e-6 * 3.5 ** k for k in range(len(dims))]
    bw = [200e9 / 3.5 ** k for k in range(len(dims))]
    mesh = discover_mesh(*topology(tuple(dims), lat, bw, noise=noise, order=order, seed=seed))
    assert mesh.shape == tuple(dims)
    expected = {frozenset(int(r) for r in order[i:i + dims[0]]) for i in range(0, n, dims[0])}
    assert groups_of(mesh, dims[0]) == expected
