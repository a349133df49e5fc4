"""Model presets (data in ``autotune/data/models.toml``) and ``--model`` resolution."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from autotune.data import data_path
from autotune.errors import AutotuneError, closest
from autotune.spec.model import ModelSpec
from autotune.spec.toml_tables import table, table_names

__all__ = ["preset_names", "load_preset", "resolve_model", "default_training_shape"]

_WORKLOAD_KEYS = ("default_global_batch", "default_seq_len")


_MODELS = data_path("models.toml")


def preset_names() -> list[str]:
    return table_names(_MODELS)


def load_preset(name: str) -> ModelSpec:
    """The preset called ``name``; unknown names get the closest suggestions."""
    if name not in preset_names():
        names = preset_names()
        near = closest(name, names)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise AutotuneError("model", f"unknown preset {name!r}; {hint}presets: {', '.join(names)}")
    return _preset_model(name)


@lru_cache(maxsize=None)  # one per preset, from its cached table: the same spec object each time
def _preset_model(name: str) -> ModelSpec:
    return ModelSpec(name=name, **{k: v for k, v in table(_MODELS, name).items() if k not in _WORKLOAD_KEYS})


def default_training_shape(model: ModelSpec) -> tuple[int, int]:
    """(global batch in sequences, sequence length) the preset trains with by default."""
    row = table(_MODELS, model.name)
    if row is not None:
        return int(row["default_global_batch"]), int(row["default_seq_len"])
    return 256, min(model.max_seq_len, 2048)


def resolve_model(value: str | Path | ModelSpec) -> ModelSpec:
    """A preset name, a path to a Hugging Face ``config.json``, or a spec passed through."""
    if isinstance(value, ModelSpec):
        return value
    if isinstance(value, Path):
        return _from_config(value)
    if value in preset_names():
        return load_preset(value)
    path = Path(value)
    if value.endswith(".json") or path.exists():
        return _from_config(path)
    return load_preset(value)


def _from_config(path: Path) -> ModelSpec:
    """A Hugging Face config.json; its readers load only when a path is given, not for a preset."""
    from autotune.spec.hf_config import model_from_hf_config

    return model_from_hf_config(path)
