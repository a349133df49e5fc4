"""What each kind of JSON file must hold, field by field: a plan file (plan.json, or a bare
plan), and a run's search record (search.json). The file has been read by
autotune.plan.json_file (every number finite); here each field gets the type its dataclass
declares (an integer for ``layers``, an object for ``model``), so that nonsense is one line
naming the field and the file, never an exception deep inside the cost model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, require
from autotune.spec.typed_fields import check_fields, check_value
from autotune.spec.typed_fields import shown as _shown

__all__ = ["check_fields", "check_value", "check_estimate_numbers", "check_cluster_ref"]


def _in_file(check, source: str | Path):
    """Run ``check``; its error names the file too."""
    try:
        check()
    except AutotuneError as err:
        raise AutotuneError(err.field, f"{err.message} (in {str(source)!r})") from None


def _optional(data: dict, key: str, kinds: tuple[type, ...], what: str) -> None:
    value = data.get(key)
    require(value is None or isinstance(value, kinds), key, f"must be {what} or null, got {_shown(value)}")


# The estimate a plan file carries is what the search printed; the plan layer cannot know the cost
# model's Estimate class (autotune.search.record checks a search record's whole), so only the
# numbers an export's header reads are checked here.
_ESTIMATE_NUMBERS = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_memory_bytes_per_gpu")


def check_estimate_numbers(estimate: Any) -> None:
    for key in _ESTIMATE_NUMBERS:
        value = estimate.get(key)
        require(value is None or (type(value) in (int, float) and value >= 0), f"estimate.{key}",
                f"must be a number >= 0, got {_shown(value)}")


def check_cluster_ref(cluster: Any) -> None:
    if isinstance(cluster, dict):
        require(isinstance(cluster.get("name"), str), "cluster.name", f"must be a string, got {_shown(cluster.get('name'))}")
        require(isinstance(cluster.get("data"), dict), "cluster.data", f"must be an object, got {_shown(cluster.get('data'))}")
