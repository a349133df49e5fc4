"""Least-squares fits of measured kernel and collective times (seed 003's profiled cost model).

Every fit is ``time_s = latency_s + x * seconds_per_unit`` with x the FLOPs of a kernel, the
bytes it moves, or the bytes of a collective. Measured times span several decades (a 64^3
GEMM and a 2048^3 one), so the fit minimises the error of log time: plain least squares would
let the largest points decide alone and leave the small kernels, which a transformer launches
by the hundred, badly predicted. Both coefficients are kept >= 0. Each point is the median of
its measured steps (see :class:`Measurement`).

A fit reports R-squared (of log time, and of time), the relative residual of every point and
their root-mean-square (``residual_rel_std``, the band estimates carry). It is refused, with
a message naming it, when too few points remain after dropping noisy measurements or when
the line explains the points too poorly to be trusted (:class:`FitLimits`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.errors import AutotuneError

__all__ = ["Measurement", "FitPoint", "LinearFit", "FitError", "FitLimits", "fit_linear",
           "AlphaBeta", "fit_alpha_beta", "collective_features"]


class FitError(AutotuneError):
    """A fit refused: too few points, too noisy, or not increasing with the work."""


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One micro-benchmark: ``amount`` units of work (FLOPs or bytes) over repeated steps.

    ``mean_s`` and ``std_s`` are seed 002's statistics of the measured steps. Fits use the
    median (``median_s``) and the scaled median absolute deviation (``mad_s``): on a shared
    machine other processes' time slices land on a few steps and would drag a mean far from
    what the kernel takes. ``group`` names the fit it belongs to (``gemm/fp32``, ``memory``,
    ``all_reduce/2``); ``label`` says what ran (shape, kernel, message size)."""

    group: str
    amount: float
    mean_s: float
    std_s: float
    median_s: float
    mad_s: float
    num_repeats: int
    label: str = ""

    def __post_init__(self) -> None:
        for name in ("amount", "mean_s", "std_s", "median_s", "mad_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise AutotuneError(f"measurement.{name}", f"must be a finite number >= 0, got {value!r}")

    @classmethod
    def from_samples(cls, *, group: str, amount: float, samples_s: Sequence[float], label: str = "") -> "Measurement":
        values = np.asarray(samples_s, dtype=float)
        median = float(np.median(values))
        return cls(group=group, amount=float(amount), mean_s=float(values.mean()),
                   std_s=float(values.std(ddof=1)) if len(values) > 1 else 0.0, median_s=median,
                   mad_s=1.4826 * float(np.median(np.abs(values - median))), num_repeats=len(values), label=label)

    @property
    def cv(self) -> float:
        """Robust coefficient of variation of the steps (MAD / median)."""
        return self.mad_s / self.median_s if self.median_s > 0 else math.inf

    def to_dict(self) -> dict:
        return {"group": self.group, "label": self.label, "amount": self.amount, "mean_s": self.mean_s,
                "std_s": self.std_s, "median_s": self.median_s, "mad_s": self.mad_s,
                "num_repeats": self.num_repeats}


@dataclass(frozen=True, kw_only=True)
class FitLimits:
    """When a fit is refused. Defaults: a 2-parameter line needs at least 4 points to leave
    any check on itself; a point whose steps scatter by more than 50% of their median is
    noise; a line whose points miss it by 50% RMS, or that explains less than 90% of the
    spread of log times, predicts nothing useful."""

    min_points: int = 4
    max_point_cv: float = 0.5
    max_residual_rel_std: float = 0.5
    min_r2: float = 0.9


@dataclass(frozen=True, kw_only=True)
class FitPoint:
    amount: float
    measured_s: float
    predicted_s: float
    label: str = ""

    @property
    def rel_residual(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True, kw_only=True)
class LinearFit:
    name: str
    latency_s: float
    seconds_per_unit: float
    r2: float  # of log time: the share of the (multi-decade) spread of log times the line explains
    r2_linear: float  # of the times themselves, dominated by the largest points
    residual_rel_std: float  # RMS of (predicted - measured) / measured
    points: tuple[FitPoint, ...]
    dropped: tuple[str, ...] = field(default=())  # labels of points left out as noisy

    @property
    def num_points(self) -> int:
        return len(self.points)

    @property
    def max_abs_rel_residual(self) -> float:
        return max(abs(p.rel_residual) for p in self.points)

    def predict_s(self, amount: float) -> float:
        return self.latency_s + amount * self.seconds_per_unit

    def report(self) -> dict:
        """The fit, its quality and every point's residual (the profile's ``fits`` entry)."""
        return {"latency_s": self.latency_s, "seconds_per_unit": self.seconds_per_unit, "r2": self.r2,
                "r2_linear": self.r2_linear, "residual_rel_std": self.residual_rel_std, "max_abs_rel_residual": self.max_abs_rel_residual,
                "num_points": self.num_points, "dropped_noisy": list(self.dropped),
                "points": [{"label": p.label, "amount": p.amount, "measured_s": p.measured_s,
                            "predicted_s": p.predicted_s, "rel_residual": p.rel_residual} for p in self.points]}


def _relative_lstsq(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """min sum(((a + b x - t) / t)^2) with a, b >= 0: the starting point of the log fit."""
    rows = np.stack([1.0 / t, x / t], axis=1)
    (a, b), *_ = np.linalg.lstsq(rows, np.ones_like(t), rcond=None)
    if a < 0 or b <= 0:  # the best line through the origin instead
        a, b = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    return float(a), float(b)


def _log_cost(a: float, b: float, x: np.ndarray, t: np.ndarray) -> float:
    return float(np.sum(np.log((a + b * x) / t) ** 2))


def _log_lstsq(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """min sum(ln((a + b x) / t)^2) with a >= 0, b > 0 (Gauss-Newton with step halving).

    Log residuals are symmetric: predicting 2x too slow costs what 2x too fast does, whereas
    relative residuals are bounded below by -1 and let fast points outvote slow ones."""
    a, b = _relative_lstsq(x, t)
    cost = _log_cost(a, b, x, t)
    for _ in range(100):
        p = a + b * x
        jac = np.stack([1.0 / p, x / p], axis=1)
        (da, db), *_ = np.linalg.lstsq(jac, -np.log(p / t), rcond=None)
        for _halving in range(30):
            na, nb = max(a + da, 0.0), max(b + db, b * 1e-3)
            new_cost = _log_cost(na, nb, x, t)
            if new_cost <= cost:
                break
            da, db = da / 2, db / 2
        if new_cost > cost or cost - new_cost < 1e-12 * max(cost, 1e-30):
            break
        a, b, cost = na, nb, new_cost
    return a, b


def _r2(t: np.ndarray, predicted: np.ndarray) -> float:
    total = float(np.sum((t - t.mean()) ** 2))
    return 1.0 - float(np.sum((t - predicted) ** 2)) / total if total > 0 else 0.0


def fit_linear(name: str, measurements: Sequence[Measurement], limits: FitLimits = FitLimits()) -> LinearFit:
    """Fit ``time = latency + amount * seconds_per_unit`` to ``measurements``, or raise FitError."""
    kept = [m for m in measurements if m.cv <= limits.max_point_cv and m.median_s > 0 and m.amount > 0]
    dropped = tuple(m.label or f"{m.amount:g}" for m in measurements if m not in kept)
    if len(kept) < limits.min_points or len({m.amount for m in kept}) < 2:
        raise FitError(f"fit.{name}", f"{len(kept)} usable points (of {len(measurements)}; {len(dropped)} too "
                       f"noisy, cv > {limits.max_point_cv}); at least {limits.min_points} at 2+ sizes needed")
    x = np.array([m.amount for m in kept], dtype=float)
    t = np.array([m.median_s for m in kept], dtype=float)
    latency, slope = _log_lstsq(x, t)
    predicted = latency + slope * x
    rel = (predicted - t) / t
    fit = LinearFit(name=name, latency_s=latency, seconds_per_unit=slope, r2=_r2(np.log(t), np.log(predicted)),
                    r2_linear=_r2(t, predicted), dropped=dropped,
                    residual_rel_std=float(math.sqrt(np.sum(rel ** 2) / max(1, len(t) - 2))),
                    points=tuple(FitPoint(amount=m.amount, measured_s=m.median_s, predicted_s=float(p), label=m.label)
                                 for m, p in zip(kept, predicted)))
    if fit.residual_rel_std > limits.max_residual_rel_std or fit.r2 < limits.min_r2:
        raise FitError(f"fit.{name}", f"too noisy to trust: R^2 of log time {fit.r2:.3f} (min {limits.min_r2}), "
                       f"relative residual RMS {fit.residual_rel_std:.2f} (max {limits.max_residual_rel_std})")
    return fit


def collective_features(op: str, group_size: int) -> tuple[float, float]:
    """(alpha steps, bytes factor) of a collective on one mesh level, as autotune.cost.comm
    prices it: ring all-reduce 2(n-1) steps and 2(n-1)/n of the buffer (Patarasuk & Yuan
    2009); all-gather, reduce-scatter and all-to-all n-1 steps and (n-1)/n; send/recv 1 and 1."""
    n = group_size
    if op == "all_reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return float(n - 1), (n - 1) / n
    if op == "send_recv":
        return 1.0, 1.0
    raise AutotuneError("collective", f"unknown collective {op!r}")


@dataclass(frozen=True, kw_only=True)
class AlphaBeta:
    """One mesh level's alpha-beta parameters: ``latency_s`` per call, ``step_latency_s`` per
    ring step, ``seconds_per_byte`` per byte moved by one rank."""

    latency_s: float
    step_latency_s: float
    seconds_per_byte: float
    r2: float
    residual_rel_std: float
    num_points: int

    @property
    def bandwidth(self) -> float:
        return 1.0 / self.seconds_per_byte


def _nnls_relative(features: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative relative least squares over three columns: the best of the 7 active sets."""
    rows, target = features / t[:, None], np.ones_like(t)
    best, best_cost = np.zeros(features.shape[1]), math.inf
    for mask in range(1, 2 ** features.shape[1]):
        cols = [j for j in range(features.shape[1]) if mask >> j & 1]
        coef, *_ = np.linalg.lstsq(rows[:, cols], target, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(features.shape[1])
        full[cols] = coef
        cost = float(np.sum((rows @ full - target) ** 2))
        if cost < best_cost:
            best, best_cost = full, cost
    return best


def _alpha_beta_row(op: str, group_size: int, nbytes: float) -> list[float]:
    steps, factor = collective_features(op, group_size)
    return [1.0, steps, factor * nbytes]


def fit_alpha_beta(name: str, points: Sequence[tuple[str, int, Measurement]],
                   limits: FitLimits = FitLimits()) -> AlphaBeta:
    """Fit base latency, step latency and per-byte time of one mesh level jointly to every
    measured (collective, group size, measurement), using the formulas the cost model prices
    unmeasured collectives with (:func:`collective_features`)."""
    kept = [(op, n, m) for op, n, m in points if m.cv <= limits.max_point_cv and m.median_s > 0]
    if len(kept) < max(limits.min_points, 3):
        raise FitError(f"fit.{name}", f"{len(kept)} usable collective measurements; at least "
                       f"{max(limits.min_points, 3)} needed")
    features = np.array([_alpha_beta_row(op, n, m.amount) for op, n, m in kept])
    t = np.array([m.median_s for _, _, m in kept])
    base, alpha, beta = _nnls_relative(features, t)
    if beta <= 0:
        raise FitError(f"fit.{name}", "collective time does not grow with message size; the points are noise")
    predicted = features @ np.array([base, alpha, beta])
    rel = (predicted - t) / t
    return AlphaBeta(latency_s=float(base), step_latency_s=float(alpha), seconds_per_byte=float(beta),
                     r2=_r2(np.log(t), np.log(predicted)), residual_rel_std=float(math.sqrt(np.sum(rel ** 2) / max(1, len(t) - 3))),
                     num_points=len(t))
