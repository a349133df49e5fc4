"""The stage DP's tables (autotune.search.inter_op): each stage's time and tail by submesh, layer count, first
layer and micro-batches in flight, laid out as the DP reads them, with the candidate caps its branch and bound
searches (autotune.search.caps). Built from ``time_s[m, n, p, r]`` and ``tail_s[m, n, p, r]`` (inter_op's
inputs: p the stage's position, 0 middle, 1 first, 2 last, 3 only stage)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.search.stage_cuts import FIRST, LAST, MIDDLE, SINGLE

__all__ = ["StageTables"]


@lru_cache(maxsize=16)
def _position_matrix(num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """For every (n, k): the position of a stage of n layers starting at layer k, and validity."""
    n = np.arange(num_layers + 1)[:, None]
    k = np.arange(num_layers + 1)[None, :]
    end = n + k
    pos = np.where(k == 0, np.where(end == num_layers, SINGLE, FIRST), np.where(end == num_layers, LAST, MIDDLE))
    valid = (n >= 1) & (end <= num_layers)
    return _frozen(np.broadcast_to(pos, valid.shape)), _frozen(valid)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@lru_cache(maxsize=16)
def _layout(num_layers: int) -> dict[str, np.ndarray]:
    """What every solve over ``num_layers`` layers shares (read-only): layer counts by (n, k),
    k + n clamped, which (n, k) reach past the end, the positions a count can take, the
    middle-stage mask and the last stages' counts."""
    L = num_layers
    _, valid = _position_matrix(L)
    n_idx = np.broadcast_to(np.arange(L + 1)[:, None], valid.shape)
    shift = np.arange(L + 1)[:, None] + np.arange(L + 1)[None, :]
    # the positions a stage of n layers can take over its starts k: only stage (n = L);
    # first or last (n = L - 1); first, middle or last (n <= L - 2)
    n = np.arange(L + 1)
    reach = np.zeros((L + 1, 4), dtype=bool)
    reach[1:, FIRST] = n[1:] < L
    reach[1:, LAST] = n[1:] < L
    reach[1:, MIDDLE] = n[1:] <= L - 2
    reach[L, SINGLE] = True
    middle = valid & (n_idx >= 1) & (np.arange(L + 1)[None, :] >= 1) & (shift < L)
    return {k: _frozen(v) for k, v in {"n_idx": n_idx, "gather": np.minimum(shift, L), "gather_ok": shift <= L,
                                       "reach": reach, "middle": middle, "middle_kn": np.ascontiguousarray(middle.T),
                                       "last_n": np.arange(1, L)}.items()}


class StageTables:
    """Per (m, r): stage time and tail matrices over (n, k); built per in-flight depth r on
    first use (a solve reads only the depths its stages hold). Tails inf and NaN read as 0."""

    def __init__(self, time_s: np.ndarray, tail_s: np.ndarray) -> None:
        num_layers = time_s.shape[1] - 1
        self.time_s, self.tail_s = time_s, _tail_read(tail_s)
        self.pos, self.valid = _position_matrix(num_layers)
        shared = _layout(num_layers)
        self.n_idx, self.gather, self.gather_ok = shared["n_idx"], shared["gather"], shared["gather_ok"]
        self.reach, self.middle, self.last_n = shared["reach"], shared["middle"], shared["last_n"]
        self.middle_kn = shared["middle_kn"]
        self.num_layers = num_layers
        self.depth = time_s.shape[3]
        reach = self.reach
        # least stage time of each layer count n over submeshes, in-flight depths and starts
        masked = np.where(reach[None, :, :, None], time_s, np.inf)  # [m, n, p, r]
        self.least_time_by_n = masked.min(axis=(0, 2, 3))
        self._by_start: dict[tuple[str, int], np.ndarray] = {}
        self._capped: tuple = (None, None, None)  # under_caps' last (caps, table, by depth)

    def time_at(self, r: int) -> np.ndarray:
        """[m, n, k]: one micro-batch through n layers starting at layer k, r in flight (inf
        where invalid)."""
        return self._at("time", r)

    def tail_at(self, r: int) -> np.ndarray:
        """[m, n, k]: the step tail of n layers starting at layer k, r in flight (inf where invalid)."""
        return self._at("tail", r)

    def _at(self, name: str, r: int) -> np.ndarray:
        found = self._by_start.get((name, r))
        if found is None:  # what np.where(valid, x[:, n, position(n, k), r], inf) gives, without a gather
            L, t = self.num_layers, (self.time_s if name == "time" else self.tail_s)[:, :, :, r]
            found = np.where(self.middle[None], t[:, :, MIDDLE, None], np.inf)
            found[:, 1:L, 0] = t[:, 1:L, FIRST]
            found[:, L, 0] = t[:, L, SINGLE]
            found[:, self.last_n, L - self.last_n] = t[:, self.last_n, LAST]
            self._by_start[(name, r)] = found
        return found

    def under_cap(self, r: int, t_max: float, tail_max: float = np.inf) -> np.ndarray:
        """[n, pos]: the first submesh's stage times at depth r, inf above the cap or where the
        stage's tail is above ``tail_max`` (NaN reads as inf)."""
        return self.under_caps(t_max, tail_max)[:, :, r]

    def under_caps(self, t_max: float, tail_max: float = np.inf, by_depth: bool = False) -> np.ndarray:
        """[n, pos, r]: under_cap at every depth (``by_depth``: the same laid out [r, pos, n],
        contiguous along n, as the DP reads a row), made once per pair of caps (a solve reads a
        depth per stage, and a masked copy per depth cost more than the DP's own arithmetic);
        the last pair's kept (a plan's least sum and its least slowest stage share the same)."""
        if self._capped[0] != (t_max, tail_max):
            t = self.time_s[0]
            with np.errstate(invalid="ignore"):
                ok = t <= t_max
                if tail_max < np.inf:
                    ok &= self.tail_s[0] <= tail_max
            capped = np.where(ok, t, np.inf)
            self._capped = ((t_max, tail_max), capped, np.ascontiguousarray(capped.transpose(2, 1, 0)))
        return self._capped[2 if by_depth else 1]

    def window_under_cap(self, r: int, lo: int, hi: int, N: int, t_max: float, tail_max: float = np.inf) -> np.ndarray:
        """The first submesh's time_at(r) transposed to [k, n] (contiguous in n: the uniform DP's
        minimum over n runs along memory), its window k in [lo, hi), n in 1..N, inf above the cap.
        Made from the stage times by position without the [m, n, k] table (L + 1)^2 a depth: a
        solve reads only this window, and at 1,000 layers building and caching the whole table
        a depth took as long as the DP and over a gigabyte (issue 29)."""
        L, capped = self.num_layers, self.under_cap(r, t_max, tail_max)
        found = np.where(self.middle_kn[lo:hi, 1:N + 1], capped[None, 1:N + 1, MIDDLE], np.inf)
        if lo == 0:
            top = min(N, L - 1)
            found[0, :top] = capped[1:top + 1, FIRST]
            if N >= L:
                found[0, L - 1] = capped[L, SINGLE]
        n = L - np.arange(max(lo, 1), hi)  # the last stages: k + n = L, k >= 1
        n = n[(n >= 1) & (n <= N)]
        found[L - n - lo, n - 1] = capped[n, LAST]
        return found

    def stage_time_values(self) -> np.ndarray:
        """Every valid stage time (some (m, n, position, r) a stage can take)."""
        return self.time_s[np.broadcast_to(self.reach[None, :, :, None], self.time_s.shape)]

    def stage_tail_values(self) -> np.ndarray:
        """The tail of every valid stage that has a time (the largest tail of a plan is one)."""
        with np.errstate(invalid="ignore"):
            return self.tail_s[self.reach[None, :, :, None] & (self.time_s < np.inf)]

    def max_layers(self, t_max: float) -> int:
        """The most layers a stage under the cap can hold (0: none fits)."""
        fits = np.flatnonzero(self.least_time_by_n <= t_max)
        return int(fits[-1]) if fits.size else 0


def _tail_read(tail_s: np.ndarray) -> np.ndarray:
    """The tails as the objective reads them: inf and NaN as 0 (the estimate's tail of a stage
    that does not fit is not a plan's)."""
    return np.where(np.isfinite(tail_s), tail_s, 0.0)
