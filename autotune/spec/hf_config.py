"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`, by its ``model_type``.

The families and the keys each reads live in :mod:`autotune.spec.hf_families`; this module reads
the file, type-checks every value it takes (a wrong type names its key), and refuses model types
it does not know (encoder-decoders, state-space models, ...) with the list of those it does.
"""

from __future__ import annotations

import json
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.spec.model import ModelSpec

__all__ = ["ConfigReader", "model_from_hf_config", "model_from_hf_dict", "supported_model_types"]

_MISSING = object()


class ConfigReader:
    """Typed access to a config dict: the first of several spellings present (and not null) wins."""

    def __init__(self, data: dict) -> None:
        self.data = data

    def _first(self, keys: tuple[str, ...]) -> tuple[str, object]:
        for key in keys:
            value = self.data.get(key)
            if value is not None:
                return key, value
        return keys[0], None

    def has(self, *keys: str) -> bool:
        return self._first(keys)[1] is not None

    def int(self, *keys: str, default: object = _MISSING) -> int:
        key, value = self._first(keys)
        if value is None:
            if default is _MISSING:
                raise AutotuneError("model", f"config.json has no {keys[0]} (expected one of: {', '.join(keys)})")
            return default  # type: ignore[return-value]
        if not isinstance(value, int) or isinstance(value, bool):
            raise AutotuneError(f"config.{key}", f"must be an integer, got {value!r}")
        return value

    def float(self, *keys: str, default: float) -> float:
        key, value = self._first(keys)
        if value is None:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise AutotuneError(f"config.{key}", f"must be a number, got {value!r}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise AutotuneError(f"config.{key}", f"must be true or false, got {value!r}")
        return value

    def str(self, *keys: str, default: str) -> str:
        key, value = self._first(keys)
        if value is None:
            return default
        if not isinstance(value, str):
            raise AutotuneError(f"config.{key}", f"must be a string, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise AutotuneError(f"config.{key}", f"must be a list of integers, got {value!r}")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AutotuneError(f"config.{key}", f"must be a list of strings, got {value!r}")
        return value

    def dict(self, key: str) -> dict:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise AutotuneError(f"config.{key}", f"must be an object, got {value!r}")
        return value


def supported_model_types() -> list[str]:
    from autotune.spec.hf_families import FAMILIES
    from autotune.spec.hf_rope_router import rope_scaling_fields, router_fields

    return sorted(FAMILIES)


def model_from_hf_config(path: Path) -> ModelSpec:
    """Parse the file at ``path``; unreadable or malformed files raise :class:`AutotuneError`."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise AutotuneError("model", f"cannot read config file {str(path)!r}: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AutotuneError("model", f"{str(path)!r} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise AutotuneError("model", f"{str(path)!r} must hold a JSON object of config keys")
    stem = Path(path).stem
    return model_from_hf_dict(data, name=stem if stem != "config" else Path(path).parent.name or "config")


def model_from_hf_dict(data: dict, *, name: str = "config") -> ModelSpec:
    """Build a spec from an already-parsed config dict."""
    from autotune.spec.hf_families import FAMILIES
    from autotune.spec.hf_rope_router import rope_scaling_fields, router_fields

    model_type = data.get("model_type")
    supported = ", ".join(supported_model_types())
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        what = "no model_type" if model_type is None else f"{model_type!r} is not supported"
        kind = _unsupported_kind(data)
        raise AutotuneError("config.model_type", f"{what}{kind}; supported: {supported}")
    reader = ConfigReader(data)
    fields = FAMILIES[model_type](reader)
    if fields.get("position_embedding") == "rotary":
        fields.update(rope_scaling_fields(reader, max_positions=int(fields["max_seq_len"])))
    if fields.get("num_experts"):
        fields.update(router_fields(reader, model_type))
    label = str(data.get("_name_or_path") or name).rstrip("/").split("/")[-1] or name
    return ModelSpec(name=label, source=f"Hugging Face config.json (model_type {model_type})", **fields)


def _unsupported_kind(data: dict) -> str:
    if data.get("is_encoder_decoder"):
        return " (an encoder-decoder model; autotune plans decoder-only transformers)"
    if "state_size" in data or "ssm_cfg" in data or "d_state" in data:
        return " (a state-space model; autotune plans transformers)"
    return ""
