"""How a serving row says how load was applied and what it measured, in the words sources use.

``concurrency_or_batch`` cells read: ``max load (infinite request rate); num_requests=3000``,
``request rate 4 RPS, 1200 prompts``, ``Server scenario, target_qps=75``, ``max throughput``, ``64``,
``concurrency=64``, ``batch size 64``, ``64 concurrent requests``. Metric and unit cells read:
``output_tokens_per_s`` or ``output_throughput``, ``median_ttft_ms``, ``ms`` or ``milliseconds``.
A cell that reads none of these leaves its row unpriced with a reason (serving_rows.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.calibrate.serving_names import RowProblem
from autotune.cost.serving_load import METRICS

__all__ = ["LoadWords", "load_words", "metric_name", "per_user_rate", "PER_USER_WITH_CONTEXT", "latency_unit_s", "throughput_scope",
           "eplb_from_notes"]


@dataclass(frozen=True, kw_only=True)
class LoadWords:
    """What a row's load cell and notes state: ``kind`` ('rate', 'concurrency', 'max_throughput'),
    and the request count, rate (per second), concurrency and run length (ms) they give (0: not stated)."""

    kind: str
    count: int = 0
    rate_per_s: float = 0.0
    concurrency: int = 0
    duration_ms: float = 0.0
    read_as: str = ""  # how a phrasing without a load kind's name was read, for ``assumed``


def _number(patterns: tuple[str, ...], text: str) -> float:
    for pattern in patterns:
        found = re.search(pattern, text, flags=re.IGNORECASE)
        if found:
            return float(found.group(1).replace(",", ""))
    return 0.0


_COUNTS = (r"num_requests=([\d,]+)", r"([\d,]+) prompts", r"([\d,]+) requests", r"([\d,]+)-sample",
           r"num[_-]prompts[ =:]+([\d,]+)")
_RATES = (r"QPS=([\d.]+)", r"request rate ([\d.]+)", r"target_qps=([\d.]+)", r"request[_-]rate[ =:]+([\d.]+)",
          r"\b(?:rps|qps)[ =:]+([\d.]+)", r"([\d.]+) ?(?:req(?:uest)?s?/s(?:ec)?|rps|qps)\b")
# Phrasings of a fixed number in flight, read on the load cell only (notes quote engine limits such as
# max_batch_size that are not the load).
_CONCURRENCY = (r"concurrency[ =:]+(\d+)", r"(\d+) ?concurrent", r"\bconc[ =:]*(\d+)", r"\bc ?= ?(\d+)\b",
                r"(\d+) ?(?:users|clients|streams)\b")
_BATCH = (r"batch(?:[ _-]?size)?[ =:]*(\d+)", r"\bbs[ =:]*(\d+)\b", r"(\d+) ?(?:sequences|seqs) in flight")
_MAX = r"infinite|\binf\b|max(?:imum)?[ _-]*(?:load|throughput)|^max$|offline|all samples|saturat"


def load_words(cell: str, notes: str) -> LoadWords:
    """The load a row's concurrency_or_batch cell (and its notes) state, or RowProblem."""
    text = f"{cell}; {notes}"
    count = int(_number(_COUNTS, text))
    duration_ms = _number((r"min_duration \(ms\)[: ]+([\d,]+)",), text)
    rate = 0.0 if re.search(r"rate[ =:]*inf", text, flags=re.IGNORECASE) else _number(_RATES, text)
    # a closed loop the load cell names (trtllm-bench --concurrency) is the load, whatever requests a second
    # the notes quote: there a rate is the run's measured result ("43146 tokens/s / 21.07 req/s"), not its input
    if rate and not _number(_RATES, cell) and _number(_CONCURRENCY, cell):
        rate = 0.0
    if rate:
        return LoadWords(kind="rate", count=count, rate_per_s=rate, duration_ms=duration_ms)
    concurrency = int(_number((r"concurrency[ =:]+(\d+)",), text) or _number(_CONCURRENCY, cell))
    if concurrency:
        return LoadWords(kind="concurrency", count=count, concurrency=concurrency)
    batch = int(_number(_BATCH, cell))
    if batch:
        return LoadWords(kind="concurrency", count=count, concurrency=batch,
                         read_as=f"batch {batch} read as {batch} requests kept in flight")
    if re.fullmatch(r"\s*\d+\s*", cell):  # the column is concurrency_or_batch: a bare number is either
        return LoadWords(kind="concurrency", count=count, concurrency=int(cell),
                         read_as=f"{cell.strip()} (concurrency_or_batch) read as {cell.strip()} requests in flight")
    if re.search(_MAX, cell.strip(), flags=re.IGNORECASE) or re.search(_MAX, text, flags=re.IGNORECASE):
        return LoadWords(kind="max_throughput", count=count)
    raise RowProblem(f"cannot read how load was applied from {cell!r} (give a request rate, a concurrency, "
                     "a batch size, or 'max throughput')")


# Other names of the metrics (vLLM's and SGLang's benchmark JSON keys, table headers).
_METRIC_WORDS = {"output_throughput": "output_tokens_per_s", "output_token_throughput": "output_tokens_per_s",
                 "output_tokens_per_second": "output_tokens_per_s", "tokens_per_s": "output_tokens_per_s",
                 "generation_throughput": "output_tokens_per_s", "total_token_throughput": "total_tokens_per_s",
                 "total_throughput": "total_tokens_per_s", "total_tokens_per_second": "total_tokens_per_s",
                 "request_throughput": "requests_per_s", "requests_per_second": "requests_per_s"}
_STATISTICS = {"mean": "mean", "avg": "mean", "average": "mean", "median": "median", "p50": "median", "p99": "p99"}
_QUANTITIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2e", "e2el": "e2e", "e2e_latency": "e2e",
               "time_to_first_token": "ttft", "time_per_output_token": "tpot", "inter_token": "itl",
               "end_to_end": "e2e", "request": "e2e"}
# A bare "throughput" is output tokens unless its unit says total tokens or requests.
_BARE_THROUGHPUT = ("throughput", "token_throughput", "tokens_per_second", "tokens_per_sec")


def metric_name(cell: str, unit: str = "") -> str:
    """The METRICS name of a metric cell: 'ttft_mean', 'mean_ttft_ms', 'Median TPOT', 'output_throughput',
    'Time to first token (mean)'; a bare 'throughput' by its unit (total tokens, requests, else output)."""
    key = re.sub(r"[^a-z0-9]+", "_", cell.strip().lower()).strip("_")
    if key in _BARE_THROUGHPUT:
        u = unit.lower()
        return "total_tokens_per_s" if "total" in u else "requests_per_s" if re.search(r"req|queries", u) \
            else "output_tokens_per_s"
    for name in (key, re.sub(r"_(ms|s|sec|seconds|us|ns|tok_s|tokens_s)$", "", key)):
        if name in METRICS or name in _METRIC_WORDS:
            return _METRIC_WORDS.get(name, name)
    key = re.sub(r"_(ms|s|sec|seconds|us|ns)$", "", key)
    words = key.split("_")
    stats = [_STATISTICS[w] for w in words if w in _STATISTICS]
    rest = "_".join(w for w in words if w not in _STATISTICS and w != "latency") or "e2e"
    quantity = _QUANTITIES.get(rest) or _QUANTITIES.get(rest.removesuffix("_latency"))
    if quantity and len(stats) == 1 and f"{quantity}_{stats[0]}" in METRICS:
        return f"{quantity}_{stats[0]}"
    why = " (say mean, median or p99)" if quantity and not stats else ""
    raise RowProblem(f"metric {cell.strip()!r} is not one autotune predicts{why} ({', '.join(METRICS)})")


# trtllm-bench's per-request rate over the whole request, the prompt's wait included: 'Per User Output Throughput'
# ('[w/ ctx]' from 1.0 on), beside its 'Per User Output Speed [1/TPOT]' (serving_load.METRICS output_per_e2e_mean)
_WITH_CONTEXT = r"per user output throughput|w/ ?ctx"
PER_USER_WITH_CONTEXT = "output_per_e2e_mean"


def per_user_rate(metric: str, unit: str) -> str:
    """The TPOT statistic whose inverse a per-user token rate is ('tokens/s/user', 'TPS/user',
    'interactivity'), or '' for any other metric: the decode rate one request sees, 1 / TPOT; trtllm-bench's
    'Per User Output Throughput' is PER_USER_WITH_CONTEXT, each request's output over its whole latency."""
    text = f"{metric} {unit}".lower()
    if not re.search(r"per[ _-]?user|/ ?user|tps[ _/-]*user|interactivity|tokens?[ _/-]*s(?:ec)?[ _/-]*(?:per[ _-]?)?user",
                     text):
        return ""
    if re.search(_WITH_CONTEXT, text):
        return PER_USER_WITH_CONTEXT
    return "tpot_median" if re.search(r"median|p50", text) else "tpot_mean"


_TIME_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3, "msec": 1e-3,
               "millisecond": 1e-3, "milliseconds": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "usec": 1e-6,
               "microseconds": 1e-6, "ns": 1e-9, "nanoseconds": 1e-9}


def latency_unit_s(unit: str) -> float:
    """Seconds per unit of a latency cell ('ms', 'milliseconds', 'ns', 'seconds')."""
    key = unit.strip().lower().split(" (")[0].strip().removesuffix("/token").strip()
    if key not in _TIME_UNITS:
        raise RowProblem(f"latency unit {unit!r} is not one of s, ms, us, ns")
    return _TIME_UNITS[key]


def throughput_scope(unit: str) -> tuple[str, str]:
    """(whose throughput the unit counts: 'gpu', 'replica' or 'system'; how a bare unit was read)."""
    u = unit.lower()
    if re.search(r"per[ -]?gpu|/ ?gpu", u):
        return "gpu", ""
    if "tp group" in u or "per replica" in u or "per instance" in u:
        return "replica", ""
    # '8-GPU group', 'whole 8-GPU group': all the row's GPUs (trtllm-bench's 'Total Output Throughput')
    if re.search(r"system|server|node|gpus?\)|gpus? group|cluster|total|all gpus", u):
        return "system", ""
    if re.search(r"user|request|stream", u):
        raise RowProblem(f"throughput unit {unit!r} counts per user or request (1 / TPOT), not a system's tokens/s")
    if re.fullmatch(r"\s*(?:output |total )?(?:tokens?|tok|reqs?|requests?)\s*(?:/|per )\s*(?:s|sec|second)\s*", u):
        return "system", f"unit {unit!r} names no scope: the throughput of all the row's GPUs"
    raise RowProblem(f"cannot tell whose throughput unit {unit!r} counts")


# An expert-parallel load balancer as launch flags name it: SGLang's --enable-eplb and redundant experts
# (--ep-num-redundant-experts N > 0, --init-expert-location), TensorRT-LLM's moe_config.load_balancer (its
# yaml's num_slots), vLLM's --enable-eplb; or a source's words ("EPLB", "expert load balancer").
_EPLB = (r"--enable-eplb\b|--init-expert-location\b|--ep-num-redundant-experts[ =]+[1-9]|\bload_balancer\s*:|"
         r"\bnum_slots\s*:|\beplb\b|expert (?:parallel(?:ism)? )?load balanc")


def eplb_from_notes(notes: str) -> bool:
    """Whether a row's notes run an expert-parallel load balancer (cost/moe_skew.py prices its residue)."""
    return bool(re.search(_EPLB, notes, flags=re.IGNORECASE))
