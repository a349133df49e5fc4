"""Load device profiles and clusters from the shipped data files or a user's file."""

from __future__ import annotations

import json
import math
import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from autotune.data import data_path
from autotune.errors import AutotuneError, closest
from autotune.spec.json_file import check_tree, read_json_file, read_text_file
from autotune.spec.hardware import ClusterSpec, DeviceProfile, LinkLevel, MemoryTier, Regression
from autotune.spec.hardware_fields import (count_field, flag_field, known_keys, number_field, optional_count,
                                          table_field, text_field, texts_field)
from autotune.spec.profile_fields import check_kept
from autotune.spec.toml_tables import table, table_names
from autotune.spec.typed_fields import shown

__all__ = [
    "device_names", "load_device", "device_from_dict", "cluster_names", "load_cluster",
    "cluster_from_dict", "link_from_dict", "regression_from_dict", "load_profile", "apply_profile",
    "check_profile", "shipped_profile", "PROFILE_SCHEMA",
]


def _parse_file(path: Path, field: str) -> dict[str, Any]:
    """A cluster, device or profile file: a regular file (read without blocking, bounded in
    size), JSON or TOML by its suffix, every number finite, holding a table."""
    if path.suffix == ".json":
        data = read_json_file(path, field, root=field)
    else:
        text = read_text_file(path, field)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise AutotuneError(field, f"{str(path)!r} is malformed: {err}") from None
        check_tree(data, field, path)  # TOML spells inf and nan
    if not isinstance(data, dict):
        raise AutotuneError(field, f"{str(path)!r} must hold a table of {field} keys, got {shown(data)}")
    return data


def _device_file_names() -> list[str]:
    return sorted(name for name in (e.name for e in data_path("devices").iterdir()) if name.endswith((".toml", ".json")))


@lru_cache(maxsize=None)  # parsed once a process; the table is shared, never changed
def _device_data(file_name: str) -> dict[str, Any]:
    text = data_path("devices", file_name).read_text()
    return tomllib.loads(text) if file_name.endswith(".toml") else json.loads(text).get("device", {})


def _device_keys(data: dict[str, Any]) -> list[str]:
    return [key.lower() for key in [data["name"], *data.get("aliases", [])]]


@lru_cache(maxsize=1)
def _device_files() -> dict[str, dict[str, Any]]:
    """Every shipped device, keyed by its lower-case name and each alias."""
    return {key: data for name in _device_file_names() for data in [_device_data(name)] for key in _device_keys(data)}


_FIRST_TABLE = re.compile(r"^\s*\[", re.MULTILINE)


@lru_cache(maxsize=1)
def _toml_device_index() -> dict[str, str]:
    """Name and aliases (lower case) -> shipped TOML device file, read from each file's root keys
    alone (the lines before its first table header, about a tenth of it): a cluster preset
    then parses only its own device's file, not all of them (pure-Python TOML, ~2 ms each).
    A file whose head does not parse on its own is parsed whole. Names are unique across files
    (tests/test_lazy_imports.py), so this finds what the full table finds."""
    index: dict[str, str] = {}
    for name in _device_file_names():
        if name.endswith(".toml"):
            text = data_path("devices", name).read_text()
            first = _FIRST_TABLE.search(text)
            try:
                head = tomllib.loads(text[:first.start()] if first else text)
            except tomllib.TOMLDecodeError:
                head = {}
            for key in _device_keys(head if "name" in head else _device_data(name)):
                index[key] = name
    return index


def _shipped_device(key: str) -> dict[str, Any] | None:
    """A shipped device's data by lower-case name or alias, else None."""
    name = _toml_device_index().get(key)
    return _device_data(name) if name is not None else _device_files().get(key)


def device_names() -> list[str]:
    return sorted({d["aliases"][0] if d.get("aliases") else d["name"] for d in _device_files().values()})


_CLUSTER_KEYS = ("device", "gpus_per_node", "intra_node", "inter_node", "host_link", "cxl_link", "max_nodes",
                 "cores_per_node", "node_slices", "tiers", "profile", "source", "host_linear_fwd_s")
_LINK_KEYS = ("name", "latency_s", "step_latency_s", "bandwidth", "collectives", "source")


def regression_from_dict(data: dict, where: str, unit_key: str) -> Regression:
    if not isinstance(data, dict):
        raise AutotuneError(where, f"must be a table (latency_s, {unit_key}), got {shown(data)}")
    r2 = data.get("r2")
    if r2 is not None and (not isinstance(r2, (int, float)) or isinstance(r2, bool) or not math.isfinite(r2)):
        raise AutotuneError(f"{where}.r2", f"must be a finite number or null, got {shown(r2)}")
    points = data.get("num_points", 0) or 0
    if not isinstance(points, int) or isinstance(points, bool) or points < 0:
        raise AutotuneError(f"{where}.num_points", f"must be a whole number >= 0, got {shown(points)}")
    return Regression(
        latency_s=number_field(data, "latency_s", where), seconds_per_unit=number_field(data, unit_key, where),
        source=text_field(data, "source", where), r2=r2,
        residual_rel_std=number_field(data, "residual_rel_std", where) if data.get("residual_rel_std") else 0.0,
        num_points=points,
        serial_latency_s=number_field(data, "serial_latency_s", where) if "serial_latency_s" in data else 0.0,
        seconds_per_reduction=number_field(data, "seconds_per_reduction", where) if "seconds_per_reduction" in data else 0.0,
        in_engine=flag_field(data, "in_engine", where, False),
    )


def _tiers(entries: Any, where: str = "tiers") -> tuple[MemoryTier, ...]:
    if not isinstance(entries, list):
        raise AutotuneError(where, f"must be a list of tier tables, got {shown(entries)}")
    tiers = []
    for i, tier in enumerate(entries):
        if not isinstance(tier, dict):
            raise AutotuneError(f"{where}[{i}]", f"must be a table (name, capacity_bytes, bandwidth_bytes_per_s, "
                                                 f"latency_s), got {shown(tier)}")
        name = text_field(tier, "name", f"{where}[{i}]", None)
        at = f"{where}.{name}"
        tiers.append(MemoryTier(name=name, capacity_bytes=number_field(tier, "capacity_bytes", at, "bytes"),
                                bandwidth_bytes_per_s=number_field(tier, "bandwidth_bytes_per_s", at, "bytes_per_s"),
                                latency_s=number_field(tier, "latency_s", at), source=text_field(tier, "source", at)))
    return tuple(tiers)


def _regressions(data: dict, where: str) -> tuple[dict, Regression, dict]:
    """(compute fits by (op class, dtype), the memory fit, memory-kernel fits by role)."""
    regs = table_field(data, "regressions", where)
    compute = {}
    for op_class, by_dtype in regs.items():
        if op_class in ("memory", "memory_kernels"):
            continue
        for dtype in table_field(regs, op_class, f"{where}.regressions"):
            fit = by_dtype[dtype]
            # a kernel's weight stream (serving_moe_w4a16_stream_<engine>: cost/serving_experts.py) is per byte
            unit = "seconds_per_byte" if "_stream_" in op_class else "seconds_per_flop"
            compute[(op_class, dtype)] = regression_from_dict(fit, f"{where}.regressions.{op_class}.{dtype}", unit)
    at = f"{where}.regressions"
    memory = regression_from_dict(table_field(regs, "memory", at), f"{at}.memory", "seconds_per_byte")
    kernels = {role: regression_from_dict(fit, f"{at}.memory_kernels.{role}", "seconds_per_byte")
               for role, fit in table_field(regs, "memory_kernels", at, required=False).items()}
    return compute, memory, kernels


def device_from_dict(data: dict[str, Any], where: str = "device") -> DeviceProfile:
    """Build a device from its data-file form (TOML table or profile JSON ``device`` object)."""
    if not isinstance(data, dict):
        raise AutotuneError(where, f"must be a table of device keys, got {shown(data)}")
    peaks_table = table_field(data, "peak_flops", where)
    peaks = {k: number_field(peaks_table, k, f"{where}.peak_flops", "flops") for k in peaks_table if k != "source"}
    compute, memory, kernels = _regressions(data, where)
    speed = data.get("attention_head_dim_64_speed", 1.0)
    efficiency = data.get("kernel_efficiency", 1.0)
    for key, value in (("attention_head_dim_64_speed", speed), ("kernel_efficiency", efficiency)):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise AutotuneError(f"{where}.{key}", f"must be a number in (0, 1], got {shown(value)}")
    return DeviceProfile(
        name=text_field(data, "name", where, None), kind=text_field(data, "kind", where, "gpu"), peak_flops=peaks,
        tiers=_tiers(data.get("tiers"), f"{where}.tiers"), compute=compute, memory=memory,
        reserved_bytes=number_field(data, "reserved_bytes", where, "bytes"), provenance=text_field(data, "provenance", where),
        aliases=texts_field(data, "aliases", where), kernel_efficiency=float(efficiency),
        kernel_efficiency_source=text_field(data, "kernel_efficiency_source", where), memory_kernels=kernels,
        fp8_gemm_any_layout=flag_field(data, "fp8_gemm_any_layout", where, False),
        attention_head_dim_64_speed=float(speed), attention_head_dim_source=text_field(data, "attention_head_dim_source", where),
    )


def load_device(name: str | Path) -> DeviceProfile:
    """A shipped device by name or alias, or a device/profile file by path."""
    key = str(name)
    path = Path(key)
    if key.endswith((".toml", ".json")) or path.is_file():
        data = _parse_file(path, "device")
        return device_from_dict(data["device"]) if "device" in data else device_from_dict(data)
    data = _shipped_device(key.lower())
    if data is None:
        near = closest(key.lower(), _device_files())
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise AutotuneError("device", f"unknown device {key!r}; {hint}known: {', '.join(device_names())}")
    return device_from_dict(data)


def link_from_dict(data: dict[str, Any], where: str) -> LinkLevel:
    if not isinstance(data, dict):
        raise AutotuneError(where, f"must be a table (latency_s, step_latency_s, bandwidth), got {shown(data)}")
    known_keys(data, _LINK_KEYS, where)
    bandwidth = number_field(data, "bandwidth", where, "bytes_per_s")
    collectives = {}
    for op, by_size in table_field(data, "collectives", where, required=False).items():
        for size in table_field(data["collectives"], op, f"{where}.collectives"):
            if not size.isdigit() or int(size) <= 0:
                raise AutotuneError(f"{where}.collectives.{op}.{size}", "must be keyed by a group size (a whole number)")
            collectives[(op, int(size))] = regression_from_dict(by_size[size], f"{where}.collectives.{op}.{size}",
                                                                "seconds_per_byte")
    return LinkLevel(name=text_field(data, "name", where, where), latency_s=number_field(data, "latency_s", where),
                     alpha_s=number_field(data, "step_latency_s", where), beta_s_per_byte=1.0 / bandwidth,
                     source=text_field(data, "source", where), collectives=collectives)


_CLUSTERS = data_path("clusters.toml")


def cluster_names() -> list[str]:
    return table_names(_CLUSTERS)


def cluster_from_dict(name: str, data: dict[str, Any]) -> ClusterSpec:
    """A cluster from its data form; ``device`` is a device name or an inline device table.

    ``profile = "NAME"`` takes the device, the measured link level and the host's core count
    from the shipped profile ``autotune/data/devices/NAME.json`` (``autotune profile``)."""
    if not isinstance(data, dict):
        raise AutotuneError("cluster", f"cluster {name!r} must be a table of cluster keys, got {shown(data)}")
    known_keys(data, _CLUSTER_KEYS, "cluster")
    if "profile" in data:
        data = _with_profile(data, shipped_profile(text_field(data, "profile", "cluster")))
    device_field = data.get("device")
    if not isinstance(device_field, (str, dict)):
        raise AutotuneError("cluster.device", f"must be a device name or a device table, got {shown(device_field)}")
    device = device_from_dict(device_field) if isinstance(device_field, dict) else load_device(device_field)
    if "tiers" in data:  # memory the node adds to each device's tiers (CXL expanders)
        device = device.with_changes(tiers=device.tiers + _tiers(data["tiers"], "cluster.tiers"))
    intra = table_field(data, "intra_node", "cluster")
    slices = data.get("node_slices", [])
    if not isinstance(slices, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in slices):
        raise AutotuneError("cluster.node_slices", f"must be a list of GPU counts, got {shown(slices)}")
    return ClusterSpec(
        name=name, device=device, gpus_per_node=count_field(data, "gpus_per_node", "cluster", "gpus"),
        intra_node=link_from_dict(intra, "intra_node"),
        inter_node=link_from_dict(table_field(data, "inter_node", "cluster", required=False) or intra, "inter_node"),
        host_link=link_from_dict(table_field(data, "host_link", "cluster"), "host_link"),
        cxl_link=link_from_dict(data["cxl_link"], "cxl_link") if data.get("cxl_link") else None,
        max_nodes=optional_count(data, "max_nodes", "cluster", "gpus"), source=text_field(data, "source", "cluster"),
        cores_per_node=optional_count(data, "cores_per_node", "cluster"), node_slices=tuple(slices),
        host_linear_fwd_s=_host_linear_s(data),
    )


def _host_linear_s(data: dict) -> float | None:
    value = data.get("host_linear_fwd_s")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise AutotuneError("cluster.host_linear_fwd_s", f"must be seconds (a number), got {shown(value)}")
    return None if value is None else float(value)


@lru_cache(maxsize=None)  # one per preset, from its cached table: the same spec object each time
def _preset_cluster(key: str) -> ClusterSpec:
    return cluster_from_dict(key, table(_CLUSTERS, key))


def load_cluster(name: str | Path) -> ClusterSpec:
    """A preset cluster by name, or a cluster file (TOML or JSON) by path."""
    key = str(name)
    names = cluster_names()
    if key in names:
        return _preset_cluster(key)
    path = Path(key)
    if key.endswith((".toml", ".json")) or path.is_file():
        return cluster_from_dict(path.stem, _parse_file(path, "cluster"))
    near = closest(key, names)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    raise AutotuneError("cluster", f"unknown cluster {key!r}; {hint}presets: {', '.join(names)}, or a path to a cluster file")


PROFILE_SCHEMA = "autotune.profile/1"


def check_profile(data: Any, where: str = "profile") -> None:
    """Raise AutotuneError unless ``data`` is a valid profile: schema, device, link levels."""
    if not isinstance(data, dict) or data.get("schema") != PROFILE_SCHEMA or not isinstance(data.get("device"), dict):
        raise AutotuneError(where, f"not an autotune profile (expected schema {PROFILE_SCHEMA!r} with a 'device' object)")
    check_tree(data, where, where)  # a dict given to the library: finite numbers, bounded depth
    device_from_dict(data["device"], f"{where}.device")
    for level, link in table_field(data, "links", where, required=False).items():
        link_from_dict(link, f"{where}.links.{level}")
    check_kept(data, where)  # host, mesh, fits, measurements: a search copies them into its run


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read a profile written by ``autotune profile`` (JSON) and check it."""
    data = _parse_file(Path(path), "profile")
    try:
        check_profile(data)
    except AutotuneError as err:
        raise AutotuneError(err.field, f"{str(path)!r}: {err.message}") from None
    return data


@lru_cache(maxsize=8)
def _shipped_profile_text(name: str) -> str:
    entry = data_path("devices", f"{name}.json")
    if not entry.is_file():
        raise AutotuneError("cluster.profile", f"no shipped profile {name!r} (autotune/data/devices/{name}.json)")
    return entry.read_text()


def shipped_profile(name: str) -> dict[str, Any]:
    """A profile shipped in ``autotune/data/devices`` (e.g. ``cpu``, measured on the CI machine kind)."""
    data = json.loads(_shipped_profile_text(name))
    check_profile(data, f"devices/{name}.json")
    return data


def _with_profile(data: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """A cluster table with the profile's device, link level and core count filled in."""
    merged = {"device": profile["device"], **data}
    link = profile.get("links", {}).get("intra_node")
    if link is not None:
        merged.setdefault("intra_node", link)
        merged.setdefault("inter_node", profile["links"].get("inter_node", link))
    cores = profile.get("host", {}).get("logical_cpus")
    if cores and "cores_per_node" not in merged:
        merged["cores_per_node"] = int(cores)
    memory = profile["device"].get("regressions", {}).get("memory")
    if profile["device"].get("kind") == "cpu" and memory and "host_link" not in merged:
        # A CPU worker's "host memory" is its own RAM: offloading is a copy at the memory fit's speed.
        merged["host_link"] = {"name": "host-memory", "latency_s": memory.get("latency_s"), "step_latency_s": 0.0,
                               "bandwidth": 1.0 / memory["seconds_per_byte"] if memory.get("seconds_per_byte") else 0.0,
                               "source": "the profile's memory regression (copies within RAM)"}
    return merged


def apply_profile(cluster: ClusterSpec, profile: dict[str, Any]) -> ClusterSpec:
    """The cluster with the profile's device (and any measured link levels) in place."""
    device = device_from_dict(profile["device"])
    links = profile.get("links", {})
    changes: dict[str, Any] = {"device": device}
    for level in ("intra_node", "inter_node"):
        if level in links:
            changes[level] = link_from_dict(links[level], f"profile.links.{level}")
    return cluster.with_changes(**changes)
