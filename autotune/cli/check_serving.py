"""``autotune check-published`` for serving CSVs: each row's prediction, and errors by engine, GPU, metric."""

from __future__ import annotations

__all__ = ["serving_report", "print_serving"]


def serving_report(paths: list) -> dict:
    """Rows and summaries of serving CSVs, as ``--json`` prints them."""
    from autotune.calibrate.serving_published import check_serving_csv, summarise

    checks = [c for path in paths for c in check_serving_csv(path)]
    priced = [c for c in checks if c.error_pct is not None]
    return {
        "rows": [c.to_dict() for c in checks],
        "summary": [g.to_dict() for g in summarise(checks, "engine,gpu,metric")],
        "by_engine": [g.to_dict() for g in summarise(checks, "engine,kind")],
        "priced": len(priced), "not_priced": len(checks) - len(priced),
        "_checks": checks,
    }


def print_serving(report: dict, *, detail: bool) -> None:
    """The table per engine, GPU and metric, per engine and kind, and the rows not priced."""
    checks = report["_checks"]
    if detail:
        print(f"{'row':12s} {'runtime':18s} {'metric':20s} {'measured':>12s} {'predicted':>12s} {'error':>8s}")
        for c in checks:
            if c.predicted is not None:
                print(f"{c.row_id:12s} {c.runtime:18s} {c.metric:20s} {c.measured:12.4g} {c.predicted:12.4g} "
                      f"{c.error_pct:+7.1f}%")
    for title, key in (("engine | GPU | metric", "summary"), ("engine | kind", "by_engine")):
        print(f"{title:52s} {'n':>3s} {'mean':>7s} {'median':>7s} {'bias':>7s}  worst")
        for g in report[key]:
            print(f"{g['group']:52s} {g['num_rows']:3d} {g['mean_abs_error_pct']:6.1f}% {g['median_abs_error_pct']:6.1f}% "
                  f"{g['mean_signed_error_pct']:+6.1f}%  {g['worst_row']}")
    reasons: dict[str, list[str]] = {}
    for c in checks:
        if c.predicted is None:
            reasons.setdefault(c.reason, []).append(c.row_id)
    if reasons:
        print(f"not priced: {report['not_priced']} rows")
        for reason, ids in reasons.items():
            print(f"  {len(ids):3d}  {reason} ({', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''})")
    saturated = [c.row_id for c in checks if c.notes]  # serving_capacity.saturation_note
    if saturated:
        print(f"priced above their replica's capacity (a queue that grows through the run): {len(saturated)} rows "
              f"({', '.join(saturated[:6])}{', ...' if len(saturated) > 6 else ''})")
    _print_conditioning(checks)
    print(f"priced {report['priced']} of {len(checks)} rows")


def _print_conditioning(checks: list) -> None:
    """The latency rows whose prediction moves more than 10% for 1% of priced capacity (serving_capacity:
    rho / (1 - rho) > 10, a rate run priced at over 10/11 of its replica's capacity), saturated ones aside."""
    from autotune.calibrate.serving_published import latency_row

    steep = [c.row_id for c in checks if latency_row(c) and (c.latency_pct_per_capacity_pct or 0.0) > 10.0]
    if steep:
        print(f"latency rows priced within 10/11 of their replica's capacity (> 10% latency per 1% capacity): "
              f"{len(steep)} rows ({', '.join(steep[:6])}{', ...' if len(steep) > 6 else ''})")
