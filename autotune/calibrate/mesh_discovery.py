"""Automatic device-mesh discovery from pairwise link measurements (seed 003, "in progress").

Seed 003 maps the network hierarchy onto an N-dimensional device mesh whose dimensions each
hold devices of the same communication capability, and proposes to find the mesh shape from
measured point-to-point costs instead of predefining it. Given the latency and bandwidth of
every rank pair (``autotune profile`` measures them by ping-pong):

1. pairs are sorted into *link classes*: runs of similar latency and, separately, of similar
   bandwidth (a gap of more than ``tolerance`` x between neighbouring sorted values starts a
   new run; 2x by default: hierarchy levels differ by more, NVLink and InfiniBand by 5-10x in
   bandwidth, while measurement noise on a shared machine reaches tens of percent); a class
   is a (latency run, bandwidth run) couple, ordered fastest first;
2. taking classes in that order, the ranks joined by links no slower than the class form
   groups; a class is a mesh level when those groups are equal-sized cliques that nest in the
   previous level's groups. A class that breaks this is merged with the next one;
3. each level is a mesh dimension of size (group size / previous group size), priced by the
   median latency and bandwidth of the pairs that first meet at that level.

The result also gives a rank order that makes each level's groups contiguous, innermost
dimension fastest, which is how ``autotune.cost.mesh`` numbers ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.errors import AutotuneError, require

__all__ = ["MeshLevel", "MeshDiscovery", "discover_mesh", "link_classes"]


@dataclass(frozen=True, kw_only=True)
class MeshLevel:
    """One mesh dimension: ``size`` groups of the previous level per group of this one."""

    size: int
    latency_s: float  # median point-to-point latency of the pairs that first meet here
    bandwidth: float  # median point-to-point bandwidth (bytes/s) of those pairs
    num_pairs: int
    spread: float  # largest relative deviation of those pairs' latency or bandwidth from the median

    def to_dict(self) -> dict:
        return {"size": self.size, "latency_s": self.latency_s, "bandwidth": self.bandwidth,
                "num_pairs": self.num_pairs, "spread": self.spread}


@dataclass(frozen=True, kw_only=True)
class MeshDiscovery:
    levels: tuple[MeshLevel, ...]  # innermost (fastest) first
    rank_order: tuple[int, ...]  # rank at each mesh position, innermost dimension fastest
    merged_classes: int  # link classes merged into a slower one because they formed no level

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(level.size for level in self.levels) or (1,)

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "levels": [lv.to_dict() for lv in self.levels],
                "rank_order": list(self.rank_order), "merged_classes": self.merged_classes}


def _runs(values: np.ndarray, tolerance: float) -> np.ndarray:
    """Run id of each value: sorted values start a new run after a gap of more than ``tolerance`` x."""
    order = np.argsort(values)
    logs = np.log(values[order])
    run_of_sorted = np.concatenate([[0], np.cumsum(np.diff(logs) > math.log(tolerance))])
    runs = np.empty(len(values), dtype=int)
    runs[order] = run_of_sorted
    return runs


def _check_matrices(latency_s: np.ndarray, bandwidth: np.ndarray) -> int:
    n = latency_s.shape[0]
    require(latency_s.shape == (n, n) and bandwidth.shape == (n, n), "mesh.pairs",
            f"latency and bandwidth must be n x n matrices, got {latency_s.shape} and {bandwidth.shape}")
    off = ~np.eye(n, dtype=bool)
    ok = np.all(np.isfinite(latency_s[off])) and np.all(latency_s[off] > 0) and np.all(bandwidth[off] > 0)
    require(bool(ok) and np.all(np.isfinite(bandwidth[off])), "mesh.pairs",
            "every pair needs a finite latency > 0 and bandwidth > 0")
    return n


def link_classes(latency_s: np.ndarray, bandwidth: np.ndarray, tolerance: float = 2.0) -> np.ndarray:
    """n x n matrix of link-class ids (0 = fastest; -1 on the diagonal)."""
    n = _check_matrices(latency_s, bandwidth)
    i, j = np.triu_indices(n, 1)
    lat = (latency_s[i, j] + latency_s[j, i]) / 2
    bw = (bandwidth[i, j] + bandwidth[j, i]) / 2
    keys = list(zip(_runs(lat, tolerance), -_runs(bw, tolerance)))  # low latency, high bandwidth first
    ranked = {key: k for k, key in enumerate(sorted(set(keys)))}
    classes = -np.ones((n, n), dtype=int)
    for a, b, key in zip(i, j, keys):
        classes[a, b] = classes[b, a] = ranked[key]
    return classes


def _groups(classes: np.ndarray, upto: int) -> list[frozenset[int]] | None:
    """Groups of ranks linked by classes <= ``upto``, if they are equal-sized cliques."""
    n = classes.shape[0]
    seen: set[int] = set()
    groups = []
    for start in range(n):
        if start in seen:
            continue
        group = frozenset(j for j in range(n) if j == start or 0 <= classes[start, j] <= upto)
        if any(not (0 <= classes[a, b] <= upto) for a in group for b in group if a != b):
            return None
        seen |= group
        groups.append(group)
    if len({len(g) for g in groups}) != 1 or sum(len(g) for g in groups) != n:
        return None
    return groups


def _level(groups, previous, size, latency_s, bandwidth) -> MeshLevel:
    pairs = [(a, b) for g in groups for a in g for b in g
             if a < b and not any(a in p and b in p for p in previous)]
    lat = np.array([latency_s[a, b] for a, b in pairs])
    bw = np.array([bandwidth[a, b] for a, b in pairs])
    lat_med, bw_med = float(np.median(lat)), float(np.median(bw))
    spread = max(float(np.max(np.abs(lat / lat_med - 1))), float(np.max(np.abs(bw / bw_med - 1))))
    return MeshLevel(size=size, latency_s=lat_med, bandwidth=bw_med, num_pairs=len(pairs), spread=spread)


def discover_mesh(latency_s: np.ndarray, bandwidth: np.ndarray, tolerance: float = 2.0) -> MeshDiscovery:
    """Group ranks into mesh dimensions of equal capability from pairwise latency (s) and
    bandwidth (bytes/s) matrices; see the module docstring."""
    latency_s, bandwidth = np.asarray(latency_s, dtype=float), np.asarray(bandwidth, dtype=float)
    require(tolerance > 1, "mesh.tolerance", f"must be > 1, got {tolerance}")
    n = _check_matrices(latency_s, bandwidth)
    if n == 1:
        return MeshDiscovery(levels=(), rank_order=(0,), merged_classes=0)
    classes = link_classes(latency_s, bandwidth, tolerance)
    previous: list[frozenset[int]] = [frozenset([r]) for r in range(n)]
    levels, tiers, merged = [], [previous], 0
    for cls in range(int(classes.max()) + 1):
        groups = _groups(classes, cls)
        nests = groups is not None and all(any(p <= g for g in groups) for p in previous)
        if not nests or len(groups[0]) == len(previous[0]):
            merged += 1
            continue
        size = len(groups[0]) // len(previous[0])
        levels.append(_level(groups, previous, size, latency_s, bandwidth))
        previous = groups
        tiers.append(groups)
    if len(previous) != 1:  # cannot happen: the slowest class joins every pair
        raise AutotuneError("mesh", "the pairwise measurements do not form a mesh")
    return MeshDiscovery(levels=tuple(levels), rank_order=_rank_order(tiers, n), merged_classes=merged)


def _rank_order(tiers: list[list[frozenset[int]]], n: int) -> tuple[int, ...]:
    """Ranks sorted by their group at each level, outermost first (groups become contiguous)."""
    def key(rank: int) -> tuple[int, ...]:
        return tuple(min(next(g for g in groups if rank in g)) for groups in reversed(tiers))
    return tuple(sorted(range(n), key=key))
