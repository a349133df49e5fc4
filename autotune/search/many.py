"""``autotune.search_many``: many (model, GPU count, ...) queries answered at once, as a
scheduler asks them.

Every query is checked before any is searched (a bad one raises AutotuneError naming it), then
they are searched grouped by everything but their GPU count, smallest count first, through the
process-wide plan cache (autotune.search.cache): stage tables priced for one count are reused by
the others (a table depends on the stage's submesh and data-parallel degree, not on the GPU
count), and a query asked before is a lookup. A query where nothing fits gets an answer with the
reason, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import AutotuneError, NoPlanError, require
from autotune.search.result import SearchResult

__all__ = ["SearchAnswer", "search_many"]

# keywords a query may not set: a batch has no run directories, shared studies or per-query callbacks
_PER_RUN = ("run_dir", "runs_dir", "storage", "study_name", "progress", "announce", "plots")


@dataclass(frozen=True, kw_only=True)
class SearchAnswer:
    """One query's answer: its search result, or why no plan fits (``result`` None)."""

    index: int  # the query's position in the batch
    query: Mapping[str, Any]
    result: SearchResult | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "query": {k: _plain(v) for k, v in self.query.items()}, "note": self.note,
                "result": self.result.to_dict() if self.result is not None else None}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else getattr(value, "name", str(value))


def _check(queries: Sequence[Mapping[str, Any]], common: Mapping[str, Any]) -> list[dict[str, Any]]:
    from autotune.search.api import SEARCH_CHECKS

    require(isinstance(queries, Sequence) and not isinstance(queries, (str, bytes)) and len(queries) > 0, "queries",
            f"must be a non-empty list of queries (dicts of autotune.search keywords), got {queries!r}")
    merged = []
    for i, query in enumerate(queries):
        require(isinstance(query, Mapping), "queries", f"query {i} must be a dict of autotune.search keywords, got {query!r}")
        full = {**common, **query}
        for key, value in full.items():
            if key not in SEARCH_CHECKS or key in _PER_RUN:
                valid = ", ".join(sorted(k for k in SEARCH_CHECKS if k not in _PER_RUN))
                raise AutotuneError(key, f"is not a keyword of a search_many query (query {i}); valid: {valid}")
            try:
                SEARCH_CHECKS[key](key, value)
            except AutotuneError as err:
                raise AutotuneError(err.field, f"query {i}: {err.message}") from None
        for key in ("model", "gpus"):
            require(key in full, key, f"query {i} gives no {key}")
        merged.append(full)
    return merged


def _group_key(query: Mapping[str, Any]) -> str:
    """Queries that differ only in their GPU count share a group (and their stage tables)."""
    return repr(sorted((k, _plain(v)) for k, v in query.items() if k != "gpus"))


def search_many(queries: Sequence[Mapping[str, Any]], *, baselines: bool = False,
                **common: Any) -> tuple[SearchAnswer, ...]:
    """Answer every query (a dict of autotune.search keywords: model and gpus at least; ``common``
    keywords apply to all), in the order given. ``baselines`` (False: none) as autotune.search."""
    from autotune.search.api import search

    merged = _check(queries, {"baselines": baselines, **common})
    order = sorted(range(len(merged)), key=lambda i: (_group_key(merged[i]), merged[i]["gpus"], i))
    answers: dict[int, SearchAnswer] = {}
    for i in order:
        try:
            answers[i] = SearchAnswer(index=i, query=queries[i], result=search(**merged[i]))
        except NoPlanError as err:  # a query where nothing fits is answered, not raised
            answers[i] = SearchAnswer(index=i, query=queries[i], result=None, note=err.message)
    return tuple(answers[i] for i in range(len(merged)))
