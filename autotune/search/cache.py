"""The plan cache: repeated and incremental queries reuse what was computed, for the same inputs only.

Two levels, both keyed by content fingerprints (not object identity), so a changed model,
workload, cluster, profile or space can never hit an entry made for other inputs:

* finished results, by the whole problem (GPU count included): a repeated query is a lookup;
* intra-op studies, by the problem without its GPU count plus (dp, stage size, micro-batch
  sizes, pipeline positions): another GPU count reuses the stage costs it shares.

Process-wide and bounded (least recently used entries go first).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
from collections import OrderedDict
from enum import Enum
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = ["PlanCache", "PLAN_CACHE", "fingerprint"]


# The canonical form of frozen dataclasses (specs: model, cluster, runtime, space) by identity:
# each entry holds its object, so its id names it while the entry lives, and a frozen spec's
# contents do not change. A warm process's queries share their presets' spec objects.
_FROZEN: dict[int, tuple[Any, Any]] = {}
_FROZEN_KEPT = 256


def _canonical(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        frozen = type(value).__dataclass_params__.frozen
        found = _FROZEN.get(id(value)) if frozen else None
        if found is not None:
            _FROZEN[id(value)] = _FROZEN.pop(id(value))  # least recently used first out
            return found[1]
        out = {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name != "raw"}
        if frozen:
            if len(_FROZEN) >= _FROZEN_KEPT:
                _FROZEN.pop(next(iter(_FROZEN)))
            _FROZEN[id(value)] = (value, out)
        return out
    if isinstance(value, (dict, MappingProxyType)):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


# The JSON text of frozen dataclasses by identity (as _FROZEN): a warm process's queries are new
# problems over the same specs, whose text (the cluster's fits most of it) is then written once.
_TEXT: dict[int, tuple[Any, str]] = {}


def _is_frozen(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type) and type(value).__dataclass_params__.frozen


def _text(value: Any) -> str:
    """``json.dumps(_canonical(value), sort_keys=True, default=str)``; a frozen dataclass's made from
    its fields' (json's default separators: each run of plain fields one dumps, a frozen field its
    own text) and kept."""
    if not _is_frozen(value):
        return json.dumps(_canonical(value), sort_keys=True, default=str)
    found = _TEXT.get(id(value))
    if found is not None and found[0] is value:
        _TEXT[id(value)] = _TEXT.pop(id(value))  # least recently used first out: the shared specs stay
        return found[1]
    parts, plain = [], {}
    for name in sorted(f.name for f in dataclasses.fields(value) if f.name != "raw"):
        field = getattr(value, name)
        if not _is_frozen(field):
            plain[name] = _canonical(field)
            continue
        if plain:  # '{"a": 1, "b": 2}' less its braces: the run's items as the whole dict writes them
            parts.append(json.dumps(plain, sort_keys=True, default=str)[1:-1])
            plain = {}
        parts.append(f"{json.dumps(name)}: {_text(field)}")
    if plain:
        parts.append(json.dumps(plain, sort_keys=True, default=str)[1:-1])
    text = "{" + ", ".join(parts) + "}"
    if len(_TEXT) >= _FROZEN_KEPT:
        _TEXT.pop(next(iter(_TEXT)))
    _TEXT[id(value)] = (value, text)
    return text


def fingerprint(*parts: Any) -> str:
    """A stable digest of dataclasses, mappings and plain values (their full contents): the SHA-256
    of ``json.dumps([_canonical(p) for p in parts], sort_keys=True, default=str)``."""
    text = "[" + ", ".join(_text(p) for p in parts) + "]"
    return hashlib.sha256(text.encode()).hexdigest()


def _nbytes(value: Any) -> int:
    costs = getattr(value, "costs", ())
    return sum(a.nbytes for c in costs for a in (c.time_s, c.tail_s, c.mem_base_bytes, c.mem_per_microbatch_bytes))


class PlanCache:
    """A bounded LRU of search results and intra-op studies."""

    def __init__(self, max_results: int = 256, max_study_bytes: int = 512 * 2**20) -> None:
        self._results: OrderedDict[str, Any] = OrderedDict()
        self._studies: OrderedDict[tuple, Any] = OrderedDict()
        self._study_bytes = 0
        self.max_results, self.max_study_bytes = max_results, max_study_bytes
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def result(self, key: str) -> Any | None:
        with self._lock:
            value = self._results.get(key)
            if value is not None:
                self._results.move_to_end(key)
            return value

    def store_result(self, key: str, value: Any) -> None:
        with self._lock:
            self._results[key] = value
            self._results.move_to_end(key)
            while len(self._results) > self.max_results:
                self._results.popitem(last=False)

    def study(self, key: tuple) -> Any | None:
        with self._lock:
            value = self._studies.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            self._studies.move_to_end(key)
            return value

    def store_study(self, key: tuple, value: Any) -> None:
        with self._lock:
            if key in self._studies:
                return
            self._studies[key] = value
            self._study_bytes += _nbytes(value)
            while self._study_bytes > self.max_study_bytes and len(self._studies) > 1:
                _, old = self._studies.popitem(last=False)
                self._study_bytes -= _nbytes(old)

    def clear(self) -> None:
        with self._lock:
            self._results.clear()
            self._studies.clear()
            self._study_bytes = 0


PLAN_CACHE = PlanCache()
