"""Turn micro-benchmark measurements into a profile (schema ``autotune.profile/1``).

The profile's ``device`` object has the keys of the device TOML files, so
``autotune.spec.hardware_data.device_from_dict`` reads it; ``links.intra_node`` has the keys
of a cluster's link level plus measured ``collectives`` fits; ``fits`` reports every fit
(R-squared, residual per point) or why it was refused; ``measurements`` keeps the raw data.
Pure Python and numpy: the torch side (``profilers``) only measures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.calibrate.fit import FitError, FitLimits, LinearFit, Measurement, fit_alpha_beta, fit_linear
from autotune.calibrate.mesh_discovery import discover_mesh
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import PROFILE_SCHEMA, check_profile
from autotune.spec.profile_fields import check_kept

__all__ = ["HostInfo", "ProfileData", "build_profile", "profile_data", "write_profile", "check_kept", "COMPUTE_CLASSES"]

# attention_bwd: the fused attention's backward kernels, fitted apart from its forward where the
# sweep timed both (they run at different rates: docs/h100-measured.md, Attention)
COMPUTE_CLASSES = ("gemm", "bmm", "attention", "attention_bwd")


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    """What was measured on: the device, the memory a worker gets, the worker's setting."""

    kind: str  # "cpu" or "gpu"
    name: str
    memory_bytes: float
    memory_source: str
    reserved_bytes: float
    reserved_source: str
    threads: int
    logical_cpus: int
    torch_version: str
    backend: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(kw_only=True)
class ProfileData:
    """Everything measured: kernel measurements, collectives, pairwise link matrices."""

    host: HostInfo
    kernels: list[Measurement]
    collectives: list[tuple[str, int, Measurement]] = field(default_factory=list)
    pair_latency_s: list[list[float]] | None = None
    pair_bandwidth: list[list[float]] | None = None
    failures: list[str] = field(default_factory=list)
    quick: bool = False
    elapsed_s: float = 0.0
    load_average: tuple[float, float] | None = None  # 1-minute load average at start and end
    clock: str = "wall"  # how kernels were timed: wall clock, or the thread's CPU time


def _fit_all(groups: dict[str, list[Measurement]], limits: FitLimits) -> tuple[dict[str, LinearFit], dict[str, str]]:
    fits, refused = {}, {}
    for name, points in sorted(groups.items()):
        try:
            fits[name] = fit_linear(name, points, limits)
        except FitError as err:
            refused[name] = err.message
    return fits, refused


def _by_group(measurements: Sequence[Measurement]) -> dict[str, list[Measurement]]:
    """Measurements by group; an attention sweep's backward points (labels ending in "bwd") form
    their own ``attention_bwd/<dtype>`` group, so forward and backward get their own lines."""
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        group = m.group
        if group.startswith("attention/") and m.label.endswith(" bwd"):
            group = "attention_bwd/" + group.split("/", 1)[1]
        groups.setdefault(group, []).append(m)
    return groups


def _regression(fit: LinearFit, unit_key: str, what: str) -> dict[str, Any]:
    return {"latency_s": fit.latency_s, unit_key: fit.seconds_per_unit, "r2": fit.r2,
            "residual_rel_std": fit.residual_rel_std, "num_points": fit.num_points,
            "source": f"measured here by autotune profile: {what}, {fit.num_points} points, least squares on "
                      f"relative error, R^2 {fit.r2:.4f}, residual RMS {100 * fit.residual_rel_std:.1f}%"}


def _peak_flops(fits: dict[str, LinearFit]) -> dict[str, Any]:
    """Highest measured GEMM rate per dtype: the MFU denominator (no datasheet is known for an
    arbitrary machine, so utilisation is relative to what its best GEMM reached here)."""
    peaks: dict[str, Any] = {}
    for name, fit in fits.items():
        if name.startswith("gemm/"):
            peaks[name.split("/")[1]] = max(p.amount / p.measured_s for p in fit.points)
    peaks["source"] = "highest GEMM rate measured by autotune profile (not a datasheet peak)"
    return peaks


# Profiler kernel (label prefix in the "memory_check" group) -> the operators its fit prices.
MEMORY_KERNELS = {"rms_norm": "norm", "gelu": "activation", "softmax": "softmax"}


def _memory_kernel_fits(points: list[Measurement], limits: FitLimits) -> tuple[dict[str, LinearFit], dict[str, str]]:
    """Per-byte fits of the checked kernels, keyed ``memory/<role>``; a kernel whose fit is
    refused (or was not measured) leaves its operators on the streaming fit."""
    groups: dict[str, list[Measurement]] = {}
    for m in points:
        role = MEMORY_KERNELS.get(m.label.split()[0])
        if role is not None:
            groups.setdefault(f"memory/{role}", []).append(m)
    return _fit_all(groups, limits)


def _device_dict(host: HostInfo, fits: dict[str, LinearFit], refused: dict[str, str]) -> dict[str, Any]:
    if "memory" not in fits or not any(n.startswith("gemm/") for n in fits):
        reasons = "; ".join(f"{k}: {v}" for k, v in refused.items() if k == "memory" or k.startswith("gemm/"))
        raise AutotuneError("profile", "a device needs the memory fit and a GEMM fit; "
                            + (reasons or "they were not measured"))
    regressions: dict[str, Any] = {c: {} for c in COMPUTE_CLASSES}
    for name, fit in fits.items():
        if "/" in name and name.split("/")[0] in COMPUTE_CLASSES:
            op_class, dtype = name.split("/")
            regressions[op_class][dtype] = _regression(fit, "seconds_per_flop", f"{op_class} sweep in {dtype}")
    memory = fits["memory"]
    regressions = {k: v for k, v in regressions.items() if v}
    regressions["memory"] = _regression(memory, "seconds_per_byte", "memory-bound kernels (bytes read + written)")
    kernels = {role: _regression(fits[f"memory/{role}"], "seconds_per_byte", f"{kernel} sweep, pricing {role} operators")
               for kernel, role in MEMORY_KERNELS.items() if f"memory/{role}" in fits}
    if kernels:
        regressions["memory_kernels"] = kernels
    tier = {"name": "hbm", "capacity_bytes": host.memory_bytes, "bandwidth_bytes_per_s": 1.0 / memory.seconds_per_unit,
            "latency_s": memory.latency_s, "source": f"capacity: {host.memory_source}; bandwidth and latency: the memory fit"}
    return {
        "name": host.name, "kind": host.kind, "aliases": list(host.aliases),
        "provenance": f"measured by autotune profile with torch {host.torch_version}, {host.threads} thread(s) per process",
        "reserved_bytes": host.reserved_bytes, "reserved_source": host.reserved_source,
        "kernel_efficiency": 1.0,
        "kernel_efficiency_source": "1.0: kernels timed in the setting workers run them (one process, same thread count); no end-to-end correction",
        "peak_flops": _peak_flops(fits), "tiers": [tier], "regressions": regressions,
    }


def _links_dict(data: ProfileData, limits: FitLimits) -> tuple[dict[str, Any], dict[str, Any]]:
    """(links, their fit reports) from the collective measurements."""
    if not data.collectives:
        return {}, {}
    fits, refused = _fit_all(_by_group([m for _, _, m in data.collectives]), limits)
    report: dict[str, Any] = {k: v.report() for k, v in fits.items()} | {k: {"refused": v} for k, v in refused.items()}
    collectives: dict[str, dict[str, Any]] = {}
    for name, fit in fits.items():
        op, size = name.split("/")
        collectives.setdefault(op, {})[size] = _regression(fit, "seconds_per_byte", f"{op} over {size} ranks")
    try:
        ab = fit_alpha_beta("link.intra_node", data.collectives, limits)
    except FitError as err:
        report["link.intra_node"] = {"refused": err.message}
        return {}, report
    trusted = ab.r2 >= limits.min_r2 and ab.residual_rel_std <= limits.max_residual_rel_std
    report["link.intra_node"] = {"latency_s": ab.latency_s, "step_latency_s": ab.step_latency_s,
                                 "bandwidth": ab.bandwidth, "r2": ab.r2, "residual_rel_std": ab.residual_rel_std,
                                 "num_points": ab.num_points, "trusted": trusted}
    verdict = "" if trusted else (" - too poor a fit to trust (the ring/tree formulas do not describe this "
                                  "backend); it prices only group sizes that were not measured")
    link = {"name": f"{data.host.backend or 'collectives'}-local", "latency_s": ab.latency_s,
            "step_latency_s": ab.step_latency_s, "bandwidth": ab.bandwidth, "collectives": collectives,
            "source": f"alpha-beta least squares over {ab.num_points} measured collectives ({data.host.backend}), "
                      f"R^2 {ab.r2:.3f}{verdict}; per-(collective, group size) fits in 'collectives' replace it"}
    return {"intra_node": link}, report


def _memory_check(memory: LinearFit | None, points: list[Measurement]) -> dict[str, Any]:
    """How far the kernels fitted on their own (GELU, softmax, norms) are from the streaming
    memory line: measured / line time per kernel, the median over its sizes."""
    if memory is None or not points:
        return {}
    ratios: dict[str, list[float]] = {}
    for m in points:
        ratios.setdefault(m.label.split()[0], []).append(m.median_s / memory.predict_s(m.amount))
    return {"memory_check": {"measured_over_predicted": {k: float(np.median(v)) for k, v in ratios.items()},
                             "note": "kernels priced by the memory regression but not used to fit it"}}


def build_profile(data: ProfileData, limits: FitLimits = FitLimits()) -> dict[str, Any]:
    """Fit everything measured and assemble the profile JSON object (validated)."""
    groups = _by_group(data.kernels)
    checked = groups.pop("memory_check", [])
    fits, refused = _fit_all(groups, limits)
    kernel_fits, kernel_refused = _memory_kernel_fits(checked, limits)
    fits, refused = fits | kernel_fits, refused | kernel_refused
    links, link_report = _links_dict(data, limits)
    report = {k: v.report() for k, v in fits.items()} | {k: {"refused": v} for k, v in refused.items()} | link_report
    report |= _memory_check(fits.get("memory"), checked)
    h = data.host
    profile: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "host": {"device": h.name, "kind": h.kind, "threads_per_process": h.threads, "logical_cpus": h.logical_cpus,
                 "torch_version": h.torch_version, "backend": h.backend, "quick": data.quick,
                 "elapsed_s": round(data.elapsed_s, 1), "load_average": data.load_average,
                 "kernel_clock": data.clock},
        "device": _device_dict(h, fits, refused),
        "fits": report, "failures": list(data.failures),
        "measurements": [m.to_dict() for m in data.kernels] + [m.to_dict() for _, _, m in data.collectives],
    }
    if links:
        profile["links"] = links
    if data.pair_latency_s is not None and data.pair_bandwidth is not None:
        mesh = discover_mesh(np.array(data.pair_latency_s), np.array(data.pair_bandwidth))
        profile["mesh"] = mesh.to_dict() | {"pair_latency_s": data.pair_latency_s, "pair_bandwidth": data.pair_bandwidth}
    profile = json.loads(json.dumps(profile))  # as it is written and read back: lists, not tuples
    check_profile(profile)
    return profile


def _check_measurements(profile: dict[str, Any]) -> None:
    """check_kept, and the measurements a refit reads: present, with groups it can fit."""
    from autotune.errors import require
    from autotune.spec.hardware import COLLECTIVES

    require(isinstance(profile.get("host"), dict), "profile.host", "must be an object (threads_per_process, ...)")
    require("measurements" in profile, "profile.measurements", "is missing: a refit fits them again")
    check_kept(profile)  # every key's type, and the measurements' (autotune.spec.profile_fields)
    for i, m in enumerate(profile["measurements"]):
        where = f"profile.measurements[{i}]"
        group = m["group"]
        kind, _, size = group.partition("/")
        ok = ("/" not in group or (kind in COMPUTE_CLASSES and "/" not in size)
              or (kind in COLLECTIVES and size.isdigit() and int(size) >= 2))
        require(ok, f"{where}.group", f"{group!r:.40} is not a measured group: CLASS/DTYPE ({', '.join(COMPUTE_CLASSES)}), "
                                      f"COLLECTIVE/RANKS ({', '.join(COLLECTIVES)}, ranks >= 2), memory or memory_check")


def profile_data(profile: dict[str, Any]) -> ProfileData:
    """The measurements a profile keeps, to fit them again (``autotune profile --refit``)."""
    _check_measurements(profile)
    try:
        h, device = profile["host"], profile["device"]
        hbm = next(t for t in device["tiers"] if t["name"] == "hbm")
        host = HostInfo(kind=device["kind"], name=device["name"], memory_bytes=hbm["capacity_bytes"],
                        memory_source=hbm["source"].split("; bandwidth")[0].removeprefix("capacity: "),
                        reserved_bytes=device["reserved_bytes"], reserved_source=device.get("reserved_source", ""),
                        threads=h["threads_per_process"], logical_cpus=h["logical_cpus"],
                        torch_version=h["torch_version"], backend=h.get("backend"), aliases=tuple(device.get("aliases", ())))
        measured = [Measurement(**m) for m in profile["measurements"]]
    except (KeyError, TypeError, StopIteration) as err:
        raise AutotuneError("profile", f"cannot be fitted again: it lacks its measurements or host ({err})") from None
    kernels = [m for m in measured if "/" not in m.group or m.group.split("/")[0] in COMPUTE_CLASSES]
    collectives = [(m.group.split("/")[0], int(m.group.split("/")[1]), m) for m in measured if m not in kernels]
    mesh = profile.get("mesh", {})
    load = h.get("load_average")
    return ProfileData(host=host, kernels=kernels, collectives=collectives, pair_latency_s=mesh.get("pair_latency_s"),
                       pair_bandwidth=mesh.get("pair_bandwidth"), failures=list(profile.get("failures", [])),
                       quick=bool(h.get("quick")), elapsed_s=float(h.get("elapsed_s", 0.0)),
                       load_average=tuple(load) if load else None, clock=h.get("kernel_clock", "wall"))


def write_profile(path: str | Path, profile: dict[str, Any]) -> None:
    """Validate and write atomically (a reader never sees half a profile)."""
    from autotune.plan.io import atomic_write_text

    check_profile(profile)
    atomic_write_text(Path(path), json.dumps(profile, indent=1, allow_nan=False) + "\n")
