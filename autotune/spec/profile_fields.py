"""What a profile keeps beside its device (host, mesh, fits, failures, measurements), checked
field by field on every read: ``evaluate/show/curve/search --profile`` use only the device and
links, but a search copies the whole profile into its run and plan files, and ``profile
--refit/--show`` read the rest back, so nonsense there is one line naming the field wherever the
file is read (issue 29), not a traceback later. Without importing autotune.calibrate (numpy and
the fits): the key types are written here, and tests/test_profile_fields.py checks them against
calibrate's Measurement and build_profile."""

from __future__ import annotations

from typing import Any

from autotune.errors import require

__all__ = ["check_kept", "MEASUREMENT_KEYS"]

_HOST_KEYS = {"threads_per_process": int, "logical_cpus": int, "torch_version": str, "backend": str | None,
              "quick": bool, "elapsed_s": float, "load_average": tuple[float, float] | None, "kernel_clock": str}
_MESH_KEYS = {"pair_latency_s": tuple[tuple[float, ...], ...], "pair_bandwidth": tuple[tuple[float, ...], ...],
              "shape": tuple[int, ...], "rank_order": tuple[int, ...], "merged_classes": int}
_LEVEL_KEYS = {"size": int, "latency_s": float, "bandwidth": float, "num_pairs": int, "spread": float}
# a fit report (LinearFit.report, the link's alpha-beta fit, the memory check, or a refusal)
_FIT_KEYS = {"latency_s": float, "seconds_per_unit": float, "r2": float, "r2_linear": float, "residual_rel_std": float,
             "max_abs_rel_residual": float, "num_points": int, "dropped_noisy": tuple[str, ...], "refused": str,
             "bandwidth": float, "step_latency_s": float, "trusted": bool, "note": str,
             "measured_over_predicted": dict[str, float]}
_POINT_KEYS = {"label": str, "amount": float, "measured_s": float, "predicted_s": float, "rel_residual": float}
# calibrate.fit.Measurement's fields (all required but the label); its numbers are finite and >= 0
MEASUREMENT_KEYS = {"group": str, "amount": float, "mean_s": float, "std_s": float, "median_s": float, "mad_s": float,
                    "num_repeats": int, "label": str}
_OPTIONAL_MEASUREMENT_KEYS = ("label",)


def check_kept(profile: dict[str, Any], where: str = "profile") -> None:
    """Each kept table's keys have their types (a wrong one names ``profile.measurements[3].group``)."""
    from autotune.spec.typed_fields import check_value

    _check_keys(profile.get("host", {}), _HOST_KEYS, f"{where}.host")
    _check_keys(profile.get("mesh", {}), _MESH_KEYS, f"{where}.mesh")
    levels = profile.get("mesh", {}).get("levels", [])
    require(isinstance(levels, list), f"{where}.mesh.levels", f"must be a list, got {levels!r:.60}")
    for i, level in enumerate(levels):
        _check_keys(level, _LEVEL_KEYS, f"{where}.mesh.levels[{i}]")
    check_value(profile.get("failures", []), tuple[str, ...], f"{where}.failures")
    _check_keys(profile.get("fits", {}), {}, f"{where}.fits")
    for name, fit in profile.get("fits", {}).items():
        _check_keys(fit, _FIT_KEYS, f"{where}.fits.{name}")
        points = fit.get("points", [])
        require(isinstance(points, list), f"{where}.fits.{name}.points", f"must be a list, got {points!r:.60}")
        for i, point in enumerate(points):
            _check_keys(point, _POINT_KEYS, f"{where}.fits.{name}.points[{i}]")
    _check_measurements(profile.get("measurements", []), f"{where}.measurements")


def _check_measurements(measured: Any, where: str) -> None:
    """A list of measurements: known keys only, each of its type, the required ones present,
    the numbers >= 0 (finiteness is check_tree's)."""
    require(isinstance(measured, list), where, f"must be a list, got {measured!r:.60}")
    known = ", ".join(MEASUREMENT_KEYS)
    for i, m in enumerate(measured):
        at = f"{where}[{i}]"
        _check_keys(m, MEASUREMENT_KEYS, at)
        unknown = sorted(set(m) - set(MEASUREMENT_KEYS))
        require(not unknown, f"{at}.{unknown[0] if unknown else ''}", f"is not a measurement key; known: {known}")
        missing = [k for k in MEASUREMENT_KEYS if k not in m and k not in _OPTIONAL_MEASUREMENT_KEYS]
        require(not missing, f"{at}.{missing[0] if missing else ''}", "is missing: a measurement has " + known)
        for key, hint in MEASUREMENT_KEYS.items():
            if hint is not str:
                require(m[key] >= 0, f"{at}.{key}", f"must be >= 0, got {m[key]!r}")


def _check_keys(table: Any, keys: dict[str, Any], where: str) -> None:
    from autotune.spec.typed_fields import check_value

    require(isinstance(table, dict), where, f"must be an object, got {table!r:.60}")
    for key, hint in keys.items():
        if key in table:
            check_value(table[key], hint, f"{where}.{key}")
