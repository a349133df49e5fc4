"""The identity of a search problem kept in a study: canonical JSON, with a schema version.

A study records the problem it was made for (model, workload, cluster... as plain data:
autotune.search.api.problem_refs), and a search that opens the study again must recognise
its own problem. What a storage gives back has been through JSON -- tuples come back as lists,
keys as strings -- so problems are compared as canonical JSON text (sorted keys), never as
Python objects. ``PROBLEM_SCHEMA`` versions the layout of that data: a study made with another
layout is named as such instead of being mistaken for another problem or misread.
"""

from __future__ import annotations

import json
from typing import Any

from autotune.errors import AutotuneError

__all__ = ["PROBLEM_ATTR", "PROBLEM_SCHEMA_ATTR", "PROBLEM_SCHEMA", "problem_json", "canonical_problem",
           "problem_attrs", "check_problem"]

PROBLEM_ATTR = "problem"
PROBLEM_SCHEMA_ATTR = "problem_schema"
PROBLEM_SCHEMA = 1  # raise when the layout of problem_refs changes; studies without the attribute are 1


def problem_json(problem: Any) -> str:
    """The canonical text of a problem: what every storage reads back, in one spelling."""
    return json.dumps(problem, sort_keys=True, default=str)


def canonical_problem(problem: Any) -> Any:
    """The problem as a storage gives it back (lists, string keys)."""
    return json.loads(problem_json(problem))


def problem_attrs(problem: Any) -> dict[str, Any]:
    """The study user attributes that record ``problem``."""
    return {PROBLEM_ATTR: canonical_problem(problem), PROBLEM_SCHEMA_ATTR: PROBLEM_SCHEMA}


def check_problem(attrs: dict[str, Any], problem: Any | None, where: str) -> None:
    """Refuse a study (``attrs``: its user attributes) made with another problem layout, or,
    given ``problem``, made for another problem than ``problem``."""
    schema = attrs.get(PROBLEM_SCHEMA_ATTR, 1 if PROBLEM_ATTR in attrs else PROBLEM_SCHEMA)
    if schema != PROBLEM_SCHEMA:
        raise AutotuneError("study", f"{where} was made by another autotune version (problem schema {schema!r}; "
                                     f"this one reads {PROBLEM_SCHEMA}); use another study name or storage")
    stored = attrs.get(PROBLEM_ATTR)
    if problem is not None and stored is not None and problem_json(stored) != problem_json(problem):
        raise AutotuneError("study", f"{where} was made for another problem; use another name")
