"""The fit report of a profile as text (``autotune profile`` and ``autotune profile --show``)."""

from __future__ import annotations

from typing import Any

__all__ = ["format_fit_report"]


def _duration(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _rate(name: str, seconds_per_unit: float) -> str:
    per_s = 1.0 / seconds_per_unit
    if name.split("/")[0] in ("gemm", "bmm", "attention", "attention_bwd"):
        return f"{per_s / 1e9:,.1f} GFLOP/s"
    return f"{per_s / 1e9:,.2f} GB/s"


def _fit_rows(fits: dict[str, Any]) -> list[str]:
    rows = [f"{'fit':18s} {'latency':>10s} {'throughput':>16s} {'R^2':>7s} {'resid RMS':>9s} {'max|resid|':>10s} {'points':>6s}"]
    for name, fit in fits.items():
        if "seconds_per_unit" not in fit:
            continue
        rows.append(f"{name:18s} {_duration(fit['latency_s']):>10s} {_rate(name, fit['seconds_per_unit']):>16s} "
                    f"{fit['r2']:7.4f} {100 * fit['residual_rel_std']:8.1f}% {100 * fit['max_abs_rel_residual']:9.1f}% "
                    f"{fit['num_points']:6d}" + (f"  ({len(fit['dropped_noisy'])} noisy dropped)" if fit.get('dropped_noisy') else ""))
    return rows


def _residual_rows(fits: dict[str, Any]) -> list[str]:
    rows = []
    for name, fit in fits.items():
        if "points" not in fit or "seconds_per_unit" not in fit:
            continue
        rows.append(f"{name}: {'point':28s} {'measured':>10s} {'predicted':>10s} {'residual':>9s}")
        rows += [f"  {p['label'][:38]:38s} {_duration(p['measured_s']):>10s} {_duration(p['predicted_s']):>10s} "
                 f"{100 * p['rel_residual']:+8.1f}%" for p in fit["points"]]
    return rows


def _link_rows(fits: dict[str, Any], mesh: dict[str, Any] | None) -> list[str]:
    rows = []
    link = fits.get("link.intra_node")
    if link and "refused" not in link:
        rows.append(f"link intra_node (alpha-beta over all collectives): base {_duration(link['latency_s'])}, "
                    f"step {_duration(link['step_latency_s'])}, {link['bandwidth'] / 1e9:.2f} GB/s, "
                    f"R^2 {link['r2']:.3f}, resid RMS {100 * link['residual_rel_std']:.1f}%, {link['num_points']} points"
                    + ("" if link.get("trusted", True) else "; too poor to trust: used only for unmeasured group sizes"))
    if mesh:
        levels = ", ".join(f"size {lv['size']}: {_duration(lv['latency_s'])}, {lv['bandwidth'] / 1e9:.2f} GB/s "
                           f"(spread {100 * lv['spread']:.0f}%)" for lv in mesh["levels"])
        rows.append(f"mesh discovered: shape {mesh['shape']}; {levels}; rank order {mesh['rank_order']}")
    return rows


def format_fit_report(profile: dict[str, Any], residuals: bool = False) -> str:
    """Every fit with R^2 and residuals; refused fits with the reason; failed benchmarks."""
    host, fits = profile.get("host", {}), profile.get("fits", {})
    lines = [f"profile of {profile['device']['name']} (torch {host.get('torch_version', '?')}, "
             f"{'quick' if host.get('quick') else 'full'} sweep, {host.get('elapsed_s', 0):.0f} s, kernels timed "
             f"by the {host.get('kernel_clock', 'wall')} clock)"]
    load, cpus = host.get("load_average"), host.get("logical_cpus") or 1
    if load and load[0] > 0.5 * cpus:  # at the end the profile's own collective workers count too
        lines.append(f"warning: the machine was busy (load average {load[0]:.1f} at start, {cpus} CPUs): other "
                     f"processes' time slices inflate and scatter the measurements")
    lines += _fit_rows(fits)
    lines += _link_rows(fits, profile.get("mesh"))
    check = fits.get("memory_check", {}).get("measured_over_predicted")
    if check:
        lines.append("streaming memory line vs kernels fitted on their own (measured / line): "
                     + ", ".join(f"{k} {v:.2f}x" for k, v in check.items()))
    lines += [f"refused {name}: {fit['refused']}" for name, fit in fits.items() if "refused" in fit]
    lines += [f"failed benchmark: {failure}" for failure in profile.get("failures", [])]
    if residuals:
        lines += _residual_rows(fits)
    return "\n".join(lines)
