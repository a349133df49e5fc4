"""Plans as configs of the frameworks users train with: Megatron-LM flags, torchtitan 0.3 options
(or a torchtitan 0.2 TOML job file), a DeepSpeed JSON config. A plan a framework cannot run is refused with the reason
(:class:`autotune.errors.AutotuneError`)."""

from __future__ import annotations

import importlib
from pathlib import Path

from autotune.errors import require_choice
from autotune.outputs.export.common import ExportResult
from autotune.plan.io import PlanFile, atomic_write_text

__all__ = ["FORMATS", "ExportResult", "export", "export_plan", "write_export"]

# format -> (module, function): an exporter's module loads when its format is asked for, so a
# search that writes no export (and the CLI's parser) does not load them all.
_EXPORTERS: dict[str, tuple[str, str]] = {
    "megatron": ("autotune.outputs.export.megatron", "to_megatron"),
    "torchtitan": ("autotune.outputs.export.torchtitan", "to_torchtitan"),
    "torchtitan-0.2": ("autotune.outputs.export.torchtitan_toml", "to_torchtitan_toml"),
    "deepspeed": ("autotune.outputs.export.deepspeed", "to_deepspeed")}
FORMATS = tuple(_EXPORTERS)


def export(plan_file: PlanFile, fmt: str) -> ExportResult:
    """``plan_file`` as a ``fmt`` config, with caveats in ``notes``."""
    require_choice("format", fmt, FORMATS)
    module, function = _EXPORTERS[fmt]
    return getattr(importlib.import_module(module), function)(plan_file)


def export_plan(plan_file: PlanFile, fmt: str) -> str:
    """The text of the ``fmt`` config (command-line options, TOML or JSON)."""
    return export(plan_file, fmt).text


def write_export(plan_file: PlanFile, fmt: str, path: str | Path | None = None,
                 run_dir: str | Path | None = None) -> tuple[Path, ExportResult]:
    """Write the config atomically to ``path``, or to ``run_dir/export-<fmt><suffix>``."""
    result = export(plan_file, fmt)
    target = Path(path) if path is not None else Path(run_dir or ".") / f"export-{fmt}{result.suffix}"
    atomic_write_text(target, result.text)
    return target, result
