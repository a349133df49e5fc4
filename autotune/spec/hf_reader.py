"""A Hugging Face ``config.json`` as a typed reader: every value taken is type-checked, and a
wrong type or a missing key names the key (the families in hf_families.py read through it)."""

from __future__ import annotations

from autotune.errors import AutotuneError

__all__ = ["ConfigReader"]

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
