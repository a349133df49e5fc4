"""Plan files: a plan with what it was made for (model, workload, cluster), as JSON.

``plan.json`` in a run directory, and any file ``autotune search`` or a user writes:

    {"schema": "autotune.plan/1", "plan": {...}, "model": {...}, "workload": {...}, "runtime": {...},
     "cluster": "dgx-h100" | {...cluster file data...}, "profile": null | "path",
     "estimate": {...} | null}

A bare plan object (``Plan.to_dict()``) is accepted too where the context comes from flags.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, require
from autotune.plan.checks import _in_file, _optional, _shown, check_cluster_ref, check_estimate_numbers, check_fields
from autotune.plan.plan import PLAN_SCHEMA, Plan
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime, runtime_from_dict
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

__all__ = ["PlanFile", "read_plan", "read_plan_file", "write_plan_file", "plan_file_dict", "atomic_write_text",
           "atomic_write_texts", "model_from_dict", "workload_from_dict", "check_output_path"]


@dataclass(frozen=True, kw_only=True)
class PlanFile:
    plan: Plan
    model: ModelSpec | None
    workload: Any | None
    cluster: str | dict | None
    profile: str | None = None
    estimate: dict | None = None
    runtime: Runtime | None = None  # None: a file written before runtimes were recorded (the default)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name longer than the file system takes (ENAMETOOLONG) and the like
        return False


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if _exists(candidate):
            return candidate
    return Path(".")


def _check_name_lengths(target: Path, field: str) -> None:
    """Each name in ``target`` within what the file system takes (NAME_MAX bytes, 255 on ext4,
    XFS and tmpfs), and the whole path within PATH_MAX: refused before any work, not by the
    write at the end."""
    base = _nearest_existing(target)
    try:
        most_name, most_path = os.pathconf(base, "PC_NAME_MAX"), os.pathconf(base, "PC_PATH_MAX")
    except (OSError, ValueError):
        most_name, most_path = 255, 4096
    shown = f"{str(target)[:60]}..." if len(str(target)) > 60 else str(target)
    for part in target.parts:
        size = len(os.fsencode(part))
        if size > most_name:
            raise AutotuneError(field, f"cannot write {shown!r}: a name of {size} bytes; the file system takes at most "
                                       f"{most_name} bytes a name")
    size = len(os.fsencode(str(target.absolute())))
    if size > most_path:
        raise AutotuneError(field, f"cannot write {shown!r}: a path of {size} bytes; at most {most_path}")


def check_output_path(path: str | Path, field: str = "out", *, directory: bool = False) -> None:
    """Fail before any work when ``path`` (a file, or with ``directory`` a folder to write in)
    cannot be written: its nearest existing ancestor must be a writable directory. Nothing is
    created: the command still writes nothing when it fails later."""
    target = Path(path)
    _check_name_lengths(target, field)
    if target.exists() and target.is_dir() != directory:
        kind = "a directory; give a file path" if target.is_dir() else "a file; give a directory"
        raise AutotuneError(field, f"cannot write {str(target)!r}: it is {kind}")
    base = target if directory and target.is_dir() else _nearest_existing(target if directory else target.parent)
    if not base.is_dir():
        raise AutotuneError(field, f"cannot write {str(target)!r}: {str(base)!r} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise AutotuneError(field, f"cannot write {str(target)!r}: no permission to write in {str(base)!r}")
    _probe(base, target, field)


def _probe(base: Path, target: Path, field: str) -> None:
    """Create and remove a file in ``base``: permission bits do not tell what root may write
    (/proc, /sys), nor whether the file system takes a new file."""
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".autotune-probe-")
    except OSError as err:
        raise AutotuneError(field, f"cannot write {str(target)!r}: {err.strerror} in {str(base)!r}") from None
    os.close(fd)
    os.unlink(probe)


def _write_error(path: Path, err: OSError, field: str) -> AutotuneError:
    """A failed write as one line naming ``path``: a full disk and the like as field ``disk``."""
    from autotune.errors import write_failure

    return write_failure(err, path=path) or AutotuneError(field, f"cannot write {str(path)!r}: {err.strerror or err}")


def _write_temp(path: Path, text: str, field: str) -> str:
    """``text`` in a new temporary file beside ``path`` (returns its name); nothing is left on failure."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return tmp
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _write_error(path, err, field) from None
        raise


def atomic_write_text(path: Path, text: str, field: str = "out") -> None:
    """Write through a temporary file and rename, so a reader never sees half a file, and a
    failed write (a full disk) leaves the old file or none and raises an AutotuneError naming
    the file. The file gets the mode a plain ``open(path, "w")`` would give it (0666 less the
    umask): mkstemp's 0600 would hide plans and reports from colleagues on a shared cluster."""
    atomic_write_texts({Path(path): text}, field)


def atomic_write_texts(files: dict[Path, str], field: str = "out") -> None:
    """Several files, all or none: each goes to a temporary file first, and only when every
    one is whole are they renamed into place (a failure removes those renamed already)."""
    temps: dict[Path, str] = {}
    placed: list[Path] = []
    try:
        for path, text in files.items():
            temps[path] = _write_temp(path, text, field)
        for path, tmp in temps.items():
            os.replace(tmp, path)
            placed.append(path)
    except BaseException as err:
        for done in placed:
            done.unlink(missing_ok=True)
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _write_error(path, err, field) from None
        raise


def model_from_dict(data: dict) -> ModelSpec:

    check_fields(data, ModelSpec, "model")
    names = {f.name for f in fields(ModelSpec)}
    try:
        return ModelSpec(**{k: v for k, v in data.items() if k in names})
    except TypeError as err:
        raise AutotuneError("model", f"malformed model in plan file: {err}") from None


def workload_from_dict(data: dict) -> Any:
    """Training workloads; inference workloads register their kinds in WORKLOAD_KINDS."""

    if not isinstance(data, dict):
        raise AutotuneError("workload", f"must be an object of workload fields, got {data!r}"[:120])
    kind = data.get("kind", "train")
    cls = WORKLOAD_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise AutotuneError("workload.kind", f"{kind!r}; known: {', '.join(WORKLOAD_KINDS)}")
    check_fields(data, cls, "workload")
    names = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in data.items() if k in names})
    except TypeError as err:
        raise AutotuneError("workload", f"malformed workload in plan file: {err}") from None


# Workload classes by their ``kind`` field; inference workloads add theirs.
WORKLOAD_KINDS: dict[str, type] = {"train": TrainingWorkload, "prefill": InferenceWorkload,
                                   "decode": InferenceWorkload, "serve": InferenceWorkload}


def plan_file_dict(*, plan: Plan, model: ModelSpec, workload: Any, runtime: Runtime, cluster: str | dict,
                   profile: str | None = None, estimate: dict | None = None) -> dict[str, Any]:
    return {"schema": PLAN_SCHEMA, "plan": plan.to_dict(), "model": asdict(model), "workload": asdict(workload),
            "runtime": runtime.to_dict(), "cluster": cluster, "profile": profile, "estimate": estimate}


def write_plan_file(path: str | Path, **content: Any) -> None:
    """Write a plan file atomically (see module docstring for the keys)."""
    atomic_write_text(Path(path), json.dumps(plan_file_dict(**content), indent=2, default=str) + "\n")


def _load_json(path: str | Path) -> tuple[Path, Any]:
    """A plan file (or a run directory's plan.json), read defensively and checked field by
    field (autotune.plan.json_file, autotune.plan.checks): nonsense is one line naming the field."""
    from autotune.spec.json_file import check_tree, read_json_file

    target = Path(path)
    if target.is_dir():
        target = target / "plan.json"
    data = read_json_file(target, "plan", root=None)
    check_tree(data, "" if isinstance(data, dict) and "plan" in data else "plan", target)
    check_plan_document(data, target)
    return target, data


def read_plan_file(path: str | Path) -> PlanFile:
    """A plan file, or a run directory's ``plan.json``."""
    target, data = _load_json(path)
    if not isinstance(data, dict):
        raise AutotuneError("plan", f"{str(target)!r} must hold a JSON object")
    if "plan" not in data:
        return PlanFile(plan=Plan.from_dict(data), model=None, workload=None, cluster=None)
    if data.get("schema", PLAN_SCHEMA) != PLAN_SCHEMA:
        raise AutotuneError("plan.schema", f"unsupported {data.get('schema')!r}; this version reads {PLAN_SCHEMA!r}")
    loaded = PlanFile(
        plan=Plan.from_dict(data["plan"]),
        model=model_from_dict(data["model"]) if data.get("model") else None,
        workload=workload_from_dict(data["workload"]) if data.get("workload") else None,
        cluster=data.get("cluster"), profile=data.get("profile"), estimate=data.get("estimate"),
        runtime=runtime_from_dict(data["runtime"]) if data.get("runtime") else None)
    if loaded.model is not None and loaded.workload is not None:  # each part may be whole, the file not
        model, workload = loaded.model, loaded.workload
        _in_file(lambda: loaded.plan.check_against(model.num_layers, workload.global_batch, model.has_embeddings),
                 target)
    return loaded


def read_plan(path: str | Path) -> Plan:
    return read_plan_file(path).plan


def check_plan_document(data: Any, source: str | Path) -> None:
    """A plan file: ``{"schema", "plan", "model", "workload", "cluster", "profile", "estimate"}``,
    or a bare plan object."""
    def check() -> None:
        require(isinstance(data, dict), "plan", f"must be a JSON object, got {_shown(data)}")
        if "plan" not in data:
            return check_fields(data, Plan, "plan")
        require(isinstance(data.get("schema", ""), str), "schema", f"must be a string, got {_shown(data.get('schema'))}")
        check_fields(data["plan"], Plan, "plan")
        _optional(data, "model", (dict,), "an object of model fields")
        _optional(data, "workload", (dict,), "an object of workload fields")
        _optional(data, "cluster", (str, dict), "a cluster name or an object")
        _optional(data, "profile", (str, dict), "a profile path or an object")
        _optional(data, "estimate", (dict,), "an object")
        if data.get("estimate") is not None:
            check_estimate_numbers(data["estimate"])
        check_cluster_ref(data.get("cluster"))
        _check_model_and_workload(data)
    _in_file(check, source)


def _check_model_and_workload(data: dict) -> None:
    from autotune.spec.model import ModelSpec

    if data.get("model"):
        check_fields(data["model"], ModelSpec, "model")
    workload = data.get("workload")
    if workload:
        kind = workload.get("kind", "train")
        require(isinstance(kind, str) and kind in WORKLOAD_KINDS, "workload.kind", f"{_shown(kind)}; known: {', '.join(WORKLOAD_KINDS)}")
        check_fields(workload, WORKLOAD_KINDS[kind], "workload")
