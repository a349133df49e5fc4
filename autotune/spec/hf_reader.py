"""A Hugging Face ``config.json`` as a typed reader: every value taken is type-checked (numbers
finite, sizes within autotune.spec.limits), and a wrong type or a missing key names the key
with its path (``config.rope_scaling.factor``); the families in hf_families.py read through it."""

from __future__ import annotations

import math
from typing import Any

from autotune.errors import AutotuneError, require_choice
from autotune.spec.limits import check_limit

__all__ = ["ConfigReader"]

_MISSING = object()
# The attention kinds of transformers' ALLOWED_ATTN_LAYER_TYPES (configuration_utils.py, 5.x) the
# families read here use; the others (linear_attention, ...) belong to architectures autotune does not plan
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")

# Keys that size the model, with the bound of autotune.spec.limits each must keep: checked as the
# key is read, before a family loops over the layers (a config of 10**9 layers is refused at once).
_SIZES = {"num_hidden_layers": "num_layers", "n_layer": "num_layers", "hidden_size": "width", "n_embd": "width",
          "n_embed": "width", "intermediate_size": "width", "intermediate_size_mlp": "width", "n_inner": "width",
          "ffn_hidden_size": "width", "moe_intermediate_size": "width", "shared_expert_intermediate_size": "width",
          "vocab_size": "vocab_size", "max_position_embeddings": "seq_len", "n_positions": "seq_len",
          "n_ctx": "seq_len", "seq_length": "seq_len", "original_max_position_embeddings": "seq_len",
          "sliding_window": "seq_len", "attention_chunk_size": "seq_len", "num_local_experts": "width",
          "n_routed_experts": "width", "num_experts": "width"}
# Sizes no model has 0 of (a window or a shared expert may be 0: none), named as the file names them
_POSITIVE = ("num_hidden_layers", "n_layer", "hidden_size", "n_embd", "n_embed", "intermediate_size", "vocab_size",
             "num_attention_heads", "n_head")


class ConfigReader:
    """Typed access to a config dict: the first of several spellings present (and not null)
    wins; ``where`` names the dict in errors (``config``, ``config.rope_scaling``)."""

    def __init__(self, data: dict, where: str = "config") -> None:
        if not isinstance(data, dict):
            raise AutotuneError(where, f"must be an object of config keys, got {_shown(data)}")
        self.data = data
        self.where = where

    def _first(self, keys: tuple[str, ...]) -> tuple[str, object]:
        for key in keys:
            value = self.data.get(key)
            if value is not None:
                return key, value
        return keys[0], None

    def field(self, key: str) -> str:
        return f"{self.where}.{key}"

    def has(self, *keys: str) -> bool:
        return self._first(keys)[1] is not None

    def int(self, *keys: str, default: object = _MISSING) -> int:
        key, value = self._first(keys)
        if value is None:
            if default is _MISSING:
                raise AutotuneError("model", f"config.json has no {keys[0]} (expected one of: {', '.join(keys)})")
            return default  # type: ignore[return-value]
        if not isinstance(value, int) or isinstance(value, bool):
            raise AutotuneError(self.field(key), f"must be an integer, got {_shown(value)}")
        if key in _POSITIVE and value <= 0:
            raise AutotuneError(self.field(key), f"must be a positive integer, got {value}")
        if key in _SIZES:
            check_limit(self.field(key), value, _SIZES[key])
        return value

    def float(self, *keys: str, default: float, positive: bool = False) -> float:
        """A finite number (``positive``: above 0)."""
        key, value = self._first(keys)
        if value is None:
            return default
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (positive and value <= 0):
            raise AutotuneError(self.field(key), f"must be a finite number{' > 0' if positive else ''}, got {_shown(value)}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise AutotuneError(self.field(key), f"must be true or false, got {_shown(value)}")
        return value

    def str(self, *keys: str, default: str, choices: tuple[str, ...] | None = None) -> str:
        key, value = self._first(keys)
        if value is None:
            return default
        if not isinstance(value, str):
            raise AutotuneError(self.field(key), f"must be a string, got {_shown(value)}")
        if choices is not None:
            require_choice(self.field(key), value, choices)
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise AutotuneError(self.field(key), f"must be a list of integers, got {_shown(value)}")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AutotuneError(self.field(key), f"must be a list of strings, got {_shown(value)}")
        return value

    def layer_types(self, num_layers: int) -> list[str] | None:
        """``layer_types`` as transformers checks it (PreTrainedConfig.validate_layer_type, 5.x): one
        entry per layer, each a known kind -- here the attention kinds these families have."""
        types = self.str_list("layer_types")
        if types is None:
            return None
        if len(types) != num_layers:
            raise AutotuneError(self.field("layer_types"), f"must give one type per layer, {num_layers:,} "
                                                           f"(num_hidden_layers); got {len(types):,}")
        for i, kind in enumerate(types):
            require_choice(f"{self.field('layer_types')}[{i}]", kind, LAYER_TYPES)
        return types

    def dict(self, key: str) -> dict:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise AutotuneError(self.field(key), f"must be an object, got {_shown(value)}")
        return value

    def nested(self, key: str) -> "ConfigReader":
        """The object under ``key`` (empty when absent or null), as a reader naming its keys
        ``where.key.name``."""
        return ConfigReader(self.dict(key), self.field(key))


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}..." if len(text) > 60 else text
