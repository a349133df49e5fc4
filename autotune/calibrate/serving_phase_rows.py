"""Rows that measure one phase of a prefill-decode disaggregated deployment (cost/serving_phase.py).

Their load cell names the phase and its batch as the source states it: ``prefill phase only (PD
disaggregation): 16384 tokens per device`` or ``decode phase only (PD disaggregation): batch size 256
per device``; ``isl`` is the prompt length (prefill) or the cached context (decode; with an ``osl``,
a request's mean context is isl + osl / 2). A prefill row measures input tokens/s, a decode row
output tokens/s, per GPU, per node or over the row's GPUs as its unit says. The notes' launch flags
name the MoE exchange (SGLang's DeepEP and two-batch overlap, cost/serving_overlap.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.calibrate.serving_degrees import row_int
from autotune.calibrate.serving_names import RowProblem
from autotune.calibrate.serving_phrases import metric_name
from autotune.cost.serving_overlap import MoeExchange, exchange_from_notes
from autotune.cost.serving_phase import PHASES
from autotune.errors import require

__all__ = ["PhaseRow", "phase_row"]

_PHASE = r"\b(prefill|decode)[ -]phase only\b"
_PER_RANK = {"prefill": r"([\d,]+) (?:prompt )?tokens per (?:device|gpu|rank)",
             "decode": r"batch(?: size)?[ =:]*([\d,]+) per (?:device|gpu|rank)"}
_INPUT_METRICS = ("input_tokens_per_s", "input_throughput", "input_token_throughput", "prefill_tokens_per_s")


@dataclass(frozen=True, kw_only=True)
class PhaseRow:
    """A one-phase row: ``phase``, the batch a rank runs (``per_rank`` prompt tokens or requests),
    the ``context`` each request's tokens see, the factor from tokens/s per GPU to the row's unit, and
    the MoE ``exchange`` its flags name (None: the step model's all-to-all)."""

    phase: str
    per_rank: int
    context: int
    per_gpu_to_unit: float
    exchange: MoeExchange | None = None
    assumed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        require(self.phase in PHASES, "phase", f"{self.phase!r}; choose one of: {', '.join(PHASES)}")
        require(isinstance(self.per_rank, int) and self.per_rank >= 1, "concurrency_or_batch",
                f"a one-phase row's batch per device must be >= 1, got {self.per_rank!r}")
        require(isinstance(self.context, int) and self.context >= 1, "isl", f"must be >= 1, got {self.context!r}")
        require(self.per_gpu_to_unit > 0, "unit", f"must count one GPU or more, got {self.per_gpu_to_unit!r}")


def phase_row(row: dict, *, gpus: int, gpus_per_node: int) -> PhaseRow | None:
    """The row as one phase of a disaggregated deployment, None when its load cell names no phase, or
    RowProblem naming the cell that is missing."""
    cell = row.get("concurrency_or_batch", "")
    found = re.search(_PHASE, cell, flags=re.IGNORECASE)
    if not found:
        return None
    phase = found.group(1).lower()
    batch = re.search(_PER_RANK[phase], cell, flags=re.IGNORECASE)
    if not batch:
        what = "prompt tokens per device" if phase == "prefill" else "batch size per device"
        raise RowProblem(f"a {phase}-only row needs its {what} in concurrency_or_batch, got {cell!r}")
    isl = _positive(row, "isl", "the prompt length" if phase == "prefill" else "the cached context")
    osl = row_int(row, "osl")
    context, assumed = isl, ()
    if phase == "decode" and osl:
        context = isl + osl // 2
        assumed = (f"decode context {context} (isl + osl / 2: a request's mean over its output)",)
    _check_metric(row, phase)
    exchange = exchange_from_notes(row.get("notes", ""), phase)
    if exchange is not None:
        assumed += (f"DeepEP {exchange.mode} kernels" + (" with two-batch overlap" if exchange.two_batch_overlap else ""),)
    return PhaseRow(phase=phase, per_rank=int(batch.group(1).replace(",", "")), context=context,
                    per_gpu_to_unit=_scale(row.get("unit", ""), gpus, gpus_per_node), exchange=exchange, assumed=assumed)


def _positive(row: dict, column: str, what: str) -> int:
    value = row_int(row, column)
    if value is None or value < 1:
        raise RowProblem(f"{column} {row.get(column, '')!r}: a one-phase row needs {what} as a positive integer")
    return value


def _check_metric(row: dict, phase: str) -> None:
    key = re.sub(r"[^a-z0-9]+", "_", row.get("metric", "").strip().lower()).strip("_")
    if phase == "prefill" and key not in _INPUT_METRICS:
        raise RowProblem(f"a prefill-only row measures input tokens/s (input_tokens_per_s), got {row.get('metric')!r}")
    if phase == "decode" and metric_name(row.get("metric", ""), row.get("unit", "")) != "output_tokens_per_s":
        raise RowProblem(f"a decode-only row measures output tokens/s (output_tokens_per_s), got {row.get('metric')!r}")


def _scale(unit: str, gpus: int, gpus_per_node: int) -> float:
    """Tokens/s per GPU -> the unit's scope: one GPU, one node, or the row's GPUs."""
    u = unit.lower()
    if re.search(r"per[ -]?gpu|/ ?gpu|per device", u):
        return 1.0
    if re.search(r"per[ -]?node|/ ?node", u):
        return float(min(gpus_per_node, gpus))
    if re.search(r"system|total|all gpus|gpus?\)", u):
        return float(gpus)
    raise RowProblem(f"cannot tell whose throughput unit {unit!r} counts (per GPU, per node, or the row's GPUs)")
