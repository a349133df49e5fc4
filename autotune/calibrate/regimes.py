"""Errors of published-run checks grouped by regime (device, dense/moe, precision, framework)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from autotune.calibrate.published import RunCheck

__all__ = ["RegimeError", "errors_by_regime", "overall_error"]


@dataclass(frozen=True, kw_only=True)
class RegimeError:
    regime: str
    num_runs: int
    mean_abs_error: float
    worst_abs_error: float
    worst_run: str
    mean_signed_error: float


def _summary(regime: str, checks: list[RunCheck]) -> RegimeError:
    errors = [abs(c.error) for c in checks]
    worst = max(checks, key=lambda c: abs(c.error))
    return RegimeError(regime=regime, num_runs=len(checks), mean_abs_error=sum(errors) / len(errors),
                       worst_abs_error=max(errors), worst_run=worst.run.run_id,
                       mean_signed_error=sum(c.error for c in checks) / len(checks))


def errors_by_regime(checks: list[RunCheck]) -> list[RegimeError]:
    groups: dict[str, list[RunCheck]] = defaultdict(list)
    for check in checks:
        groups[check.run.regime].append(check)
    return [_summary(regime, group) for regime, group in sorted(groups.items())]


def overall_error(checks: list[RunCheck]) -> RegimeError:
    return _summary("all", checks)
