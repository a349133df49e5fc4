"""Load device profiles and clusters from the shipped data files or a user's file."""

from __future__ import annotations

import json
import math
import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, closest
from autotune.spec.hardware import ClusterSpec, DeviceProfile, LinkLevel, MemoryTier, Regression

__all__ = [
    "device_names", "load_device", "device_from_dict", "cluster_names", "load_cluster",
    "cluster_from_dict", "link_from_dict", "regression_from_dict", "load_profile", "apply_profile",
    "check_profile", "shipped_profile", "PROFILE_SCHEMA",
]


def _read_data(name: str) -> str:
    return resources.files("autotune.data").joinpath(name).read_text()


def _parse_file(path: Path, field: str) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as err:
        raise AutotuneError(field, f"cannot read {str(path)!r}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise AutotuneError(field, f"{str(path)!r} is not a text file (expected {'JSON' if path.suffix == '.json' else 'TOML'})") from None
    try:
        return json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
        raise AutotuneError(field, f"{str(path)!r} is malformed: {err}") from None


@lru_cache(maxsize=1)
def _device_files() -> dict[str, dict[str, Any]]:
    """Every shipped device, keyed by its lower-case name and each alias."""
    table: dict[str, dict[str, Any]] = {}
    folder = resources.files("autotune.data").joinpath("devices")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text())
        elif entry.name.endswith(".json"):
            data = json.loads(entry.read_text()).get("device", {})
        else:
            continue
        for key in [data["name"], *data.get("aliases", [])]:
            table[key.lower()] = data
    return table


def device_names() -> list[str]:
    return sorted({d["aliases"][0] if d.get("aliases") else d["name"] for d in _device_files().values()})


def _number(data: dict, key: str, where: str) -> float:
    value = data.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise AutotuneError(f"{where}.{key}", f"must be a number, got {value!r}")
    if value < 0:
        raise AutotuneError(f"{where}.{key}", f"must be >= 0, got {value!r}")
    return float(value)


def _count(data: dict, key: str, where: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise AutotuneError(f"{where}.{key}", f"must be a positive integer, got {value!r}")
    return value


def regression_from_dict(data: dict, where: str, unit_key: str) -> Regression:
    return Regression(
        latency_s=_number(data, "latency_s", where),
        seconds_per_unit=_number(data, unit_key, where),
        source=str(data.get("source", "")),
        r2=data.get("r2"),
        residual_rel_std=float(data.get("residual_rel_std", 0.0) or 0.0),
        num_points=int(data.get("num_points", 0) or 0),
    )


def _tiers(entries: list[dict[str, Any]]) -> tuple[MemoryTier, ...]:
    return tuple(
        MemoryTier(name=t["name"], capacity_bytes=_number(t, "capacity_bytes", f"tiers.{t['name']}"),
                   bandwidth_bytes_per_s=_number(t, "bandwidth_bytes_per_s", f"tiers.{t['name']}"),
                   latency_s=_number(t, "latency_s", f"tiers.{t['name']}"), source=t.get("source", ""))
        for t in entries)


def device_from_dict(data: dict[str, Any]) -> DeviceProfile:
    """Build a device from its data-file form (TOML table or profile JSON ``device`` object)."""
    try:
        peaks = {k: _number(data["peak_flops"], k, "peak_flops") for k in data["peak_flops"] if k != "source"}
        tiers = _tiers(data["tiers"])
        regs = data["regressions"]
        compute = {
            (op_class, dtype): regression_from_dict(fit, f"regressions.{op_class}.{dtype}", "seconds_per_flop")
            for op_class, by_dtype in regs.items() if op_class not in ("memory", "memory_kernels")
            for dtype, fit in by_dtype.items()
        }
        memory = regression_from_dict(regs["memory"], "regressions.memory", "seconds_per_byte")
        kernels = {role: regression_from_dict(fit, f"regressions.memory_kernels.{role}", "seconds_per_byte")
                   for role, fit in regs.get("memory_kernels", {}).items()}
        return DeviceProfile(
            name=data["name"], kind=data.get("kind", "gpu"), peak_flops=peaks, tiers=tiers,
            compute=compute, memory=memory, reserved_bytes=_number(data, "reserved_bytes", "device"),
            provenance=data.get("provenance", ""), aliases=tuple(data.get("aliases", ())),
            kernel_efficiency=float(data.get("kernel_efficiency", 1.0)),
            kernel_efficiency_source=str(data.get("kernel_efficiency_source", "")),
            memory_kernels=kernels, fp8_gemm_any_layout=data.get("fp8_gemm_any_layout", False),
            attention_head_dim_64_speed=data.get("attention_head_dim_64_speed", 1.0),
            attention_head_dim_source=str(data.get("attention_head_dim_source", "")),
        )
    except KeyError as err:
        raise AutotuneError("device", f"device data lacks {err.args[0]!r}") from None


def load_device(name: str | Path) -> DeviceProfile:
    """A shipped device by name or alias, or a device/profile file by path."""
    key = str(name)
    path = Path(key)
    if key.endswith((".toml", ".json")) or path.is_file():
        data = _parse_file(path, "device")
        return device_from_dict(data.get("device", data))
    table = _device_files()
    if key.lower() not in table:
        near = closest(key.lower(), table)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise AutotuneError("device", f"unknown device {key!r}; {hint}known: {', '.join(device_names())}")
    return device_from_dict(table[key.lower()])


def link_from_dict(data: dict[str, Any], where: str) -> LinkLevel:
    bandwidth = _number(data, "bandwidth", where)
    if bandwidth <= 0:
        raise AutotuneError(f"{where}.bandwidth", "must be > 0 bytes/s")
    collectives = {
        (op, int(size)): regression_from_dict(fit, f"{where}.collectives.{op}.{size}", "seconds_per_byte")
        for op, by_size in data.get("collectives", {}).items() for size, fit in by_size.items()
    }
    return LinkLevel(name=str(data.get("name", where)), latency_s=_number(data, "latency_s", where),
                     alpha_s=_number(data, "step_latency_s", where), beta_s_per_byte=1.0 / bandwidth,
                     source=str(data.get("source", "")), collectives=collectives)


@lru_cache(maxsize=1)
def _cluster_table() -> dict[str, dict[str, Any]]:
    return tomllib.loads(_read_data("clusters.toml"))


def cluster_names() -> list[str]:
    return list(_cluster_table())


def cluster_from_dict(name: str, data: dict[str, Any]) -> ClusterSpec:
    """A cluster from its data form; ``device`` is a device name or an inline device table.

    ``profile = "NAME"`` takes the device, the measured link level and the host's core count
    from the shipped profile ``autotune/data/devices/NAME.json`` (``autotune profile``)."""
    if "profile" in data:
        data = _with_profile(data, shipped_profile(str(data["profile"])))
    try:
        device_field = data["device"]
        device = device_from_dict(device_field) if isinstance(device_field, dict) else load_device(device_field)
        if "tiers" in data:  # memory the node adds to each device's tiers (CXL expanders)
            device = device.with_changes(tiers=device.tiers + _tiers(data["tiers"]))
        cxl = data.get("cxl_link")
        return ClusterSpec(
            name=name, device=device, gpus_per_node=_count(data, "gpus_per_node", "cluster"),
            intra_node=link_from_dict(data["intra_node"], "intra_node"),
            inter_node=link_from_dict(data.get("inter_node", data["intra_node"]), "inter_node"),
            host_link=link_from_dict(data["host_link"], "host_link"),
            cxl_link=link_from_dict(cxl, "cxl_link") if cxl else None,
            max_nodes=_count(data, "max_nodes", "cluster") if data.get("max_nodes") is not None else None, source=str(data.get("source", "")),
            cores_per_node=data.get("cores_per_node"), node_slices=tuple(data.get("node_slices", ())),
        )
    except KeyError as err:
        raise AutotuneError("cluster", f"cluster {name!r} lacks {err.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as err:  # a string where a number or table belongs
        if isinstance(err, AutotuneError):
            raise
        raise AutotuneError("cluster", f"cluster {name!r} has a value of the wrong type: {err}") from None


def load_cluster(name: str | Path) -> ClusterSpec:
    """A preset cluster by name, or a cluster file (TOML or JSON) by path."""
    key = str(name)
    table = _cluster_table()
    if key in table:
        return cluster_from_dict(key, table[key])
    path = Path(key)
    if key.endswith((".toml", ".json")) or path.is_file():
        return cluster_from_dict(path.stem, _parse_file(path, "cluster"))
    near = closest(key, table)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    raise AutotuneError("cluster", f"unknown cluster {key!r}; {hint}presets: {', '.join(table)}, or a path to a cluster file")


PROFILE_SCHEMA = "autotune.profile/1"


def check_profile(data: Any, where: str = "profile") -> None:
    """Raise AutotuneError unless ``data`` is a valid profile: schema, device, link levels."""
    if not isinstance(data, dict) or data.get("schema") != PROFILE_SCHEMA or not isinstance(data.get("device"), dict):
        raise AutotuneError(where, f"not an autotune profile (expected schema {PROFILE_SCHEMA!r} with a 'device' object)")
    device_from_dict(data["device"])
    links = data.get("links", {})
    if not isinstance(links, dict):
        raise AutotuneError(f"{where}.links", "must be an object of link levels")
    for level, link in links.items():
        if not isinstance(link, dict):
            raise AutotuneError(f"{where}.links.{level}", "must be an object (latency_s, step_latency_s, bandwidth)")
        link_from_dict(link, f"{where}.links.{level}")


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
    entry = resources.files("autotune.data").joinpath("devices", f"{name}.json")
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
