"""Model presets (data in ``autotune/data/models.toml``) and ``--model`` resolution."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

from autotune.data import data_path
from autotune.errors import AutotuneError, closest
from autotune.spec.model import ModelSpec

__all__ = ["preset_names", "load_preset", "resolve_model", "default_training_shape"]

_WORKLOAD_KEYS = ("default_global_batch", "default_seq_len")


@lru_cache(maxsize=1)
def _preset_table() -> dict[str, dict]:
    text = data_path("models.toml").read_text()
    return tomllib.loads(text)


def preset_names() -> list[str]:
    return list(_preset_table())


def load_preset(name: str) -> ModelSpec:
    """The preset called ``name``; unknown names get the closest suggestions."""
    table = _preset_table()
    if name not in table:
        near = closest(name, table)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise AutotuneError("model", f"unknown preset {name!r}; {hint}presets: {', '.join(table)}")
    return _preset_model(name)


@lru_cache(maxsize=None)  # one per preset, from the cached table: the same spec object each time
def _preset_model(name: str) -> ModelSpec:
    return ModelSpec(name=name, **{k: v for k, v in _preset_table()[name].items() if k not in _WORKLOAD_KEYS})


def default_training_shape(model: ModelSpec) -> tuple[int, int]:
    """(global batch in sequences, sequence length) the preset trains with by default."""
    row = _preset_table().get(model.name)
    if row is not None:
        return int(row["default_global_batch"]), int(row["default_seq_len"])
    return 256, min(model.max_seq_len, 2048)


def resolve_model(value: str | Path | ModelSpec) -> ModelSpec:
    """A preset name, a path to a Hugging Face ``config.json``, or a spec passed through."""
    if isinstance(value, ModelSpec):
        return value
    if isinstance(value, Path):
        return _from_config(value)
    if value in _preset_table():
        return load_preset(value)
    path = Path(value)
    if value.endswith(".json") or path.exists():
        return _from_config(path)
    return load_preset(value)


def _from_config(path: Path) -> ModelSpec:
    """A Hugging Face config.json; its readers load only when a path is given, not for a preset."""
    from autotune.spec.hf_config import model_from_hf_config

    return model_from_hf_config(path)
