"""Iteration times of published rows that gave only TFLOP/s per GPU, from each source's own FLOP count.

A TFLOP/s figure is a step time once the FLOPs per step the source counted are known:
iter_s = source FLOPs per step / (TFLOP/s per GPU x 1e12 x GPUs). Each source's count is written
here as that source wrote it (``SOURCE_FLOPS`` names the file and lines), never the cost model's
own count: a source that leaves out or halves a term makes its TFLOP/s larger or smaller, and the
iteration time must undo exactly what it did. Rows whose source count is unknown stay unexpressible.
"""

from __future__ import annotations

import re

__all__ = ["SOURCE_FLOPS", "derive_iter_s"]

# (setting, value assumed, why): printed by ``autotune check-published --assumptions``.
SOURCE_FLOPS: tuple[tuple[str, str, str], ...] = (
    ("NeMo long-sequence table, H100 (24.03.01)",
     "F = B s l h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(l h)), V = 32000, no causal discount",
     "NeMo's llama2 model FLOPs when the table was published: nemo/collections/common/metrics/perf_metrics.py "
     "_llama2, lines 147-164 @5b47a94c11 (Oct 2024, the commit that added the table)"),
    ("NeMo long-sequence table, B200 (25.04.rc2)",
     "the same form with V = 128256, no causal discount",
     "nemo/utils/flops_formulas.py llama3, lines 88-105 @14d427f575 (Apr 2025, the commit that added the "
     "B200 table); the 0.5 causal factor came later (NeMo PR #14424, Aug 2025)"),
    ("NeMo long-sequence table, B200 GPUs",
     "GPUs = TP x CP x DP with DP as listed (2, 4, ..., 4)",
     "the table's first version (@14d427f575) says so; the later #GPUs column (= SeqLen K, @19fadb67b0) cannot "
     "hold its own Batch Size (4 sequences at 1M over TP 4 x CP 16 on 1024 GPUs would need DP 16)"),
    ("NeMo long-sequence tables, batch", "micro-batch 1, global batch from the Batch Size column",
     "Megatron-Core's default micro_batch_size; MBS is not in the table"),
    ("Llama 3 405B (Dubey et al. 2024, Table 4), 8K tokens",
     "F = B s (6N + 6 l s h): all parameters, causal attention",
     "the paper gives no count; 6N and PaLM's 6N + 12 l s h are within 4% of it at 8K. At 128K they differ 2.3x: "
     "that row stays unpriced"),
    ("Megatron-Bridge table rows with only TFLOP/s",
     "FLOPs per token = Model TFLOP/s / tokens/s of the same table's row with the same model, sequence and GPUs",
     "the source's own count, read off its sibling row (e.g. nemo-mb-082 for nemo-mb-083)"),
)

# NeMo's vocabulary constants (perf_metrics_utils.py LLM_VOCAB_SIZE_MAP, lines 8-15 @5b47a94c11).
NEMO_VOCAB = {"llama2": 32000, "llama3": 128256}
# Meta's Llama 3 405B rows (Dubey et al. 2024, Table 4, via a transcription of a slide of it): the
# paper does not give its FLOP count. At 8K tokens 6N, 6N with causal attention and 6N with full
# attention (PaLM's count) lie within 4% of the middle one, which is taken; at 128K they differ by
# a factor of 2.3, so that row's iteration time is not known.
LLAMA3_LONG_SEQ_UNEXPRESSIBLE = (
    "no iteration time: the paper does not give its FLOP count, and at 128K tokens 6N, 6N with causal "
    "attention and 6N with full attention (PaLM's) differ by a factor of 2.3")
LLAMA3_KNOWN_COUNT_MAX_SEQ = 8192


def llama_params(row: dict[str, str]) -> float:
    """Parameters of a Llama-shaped row (GQA attention, SwiGLU, untied embeddings; norms left out)."""
    l, h, v, f = int(row["layers"]), int(row["hidden"]), int(row["vocab"]), int(row["ffn"])
    kv_share = int(row["kv_heads"] or row["heads"]) / int(row["heads"])
    return l * (h * h * (2.0 + 2.0 * kv_share) + 3.0 * h * f) + 2.0 * v * h


def _llama3_paper(row: dict[str, str]) -> tuple[float, dict[str, str]] | str:
    """FLOPs per step as 6N plus causal attention (6 l s h per token) for Meta's 8K rows."""
    s = int(row["seq"] or 0)
    if not s or not row["global_batch"]:
        return "no iteration time: the sequence length and batch are not stated"
    if s > LLAMA3_KNOWN_COUNT_MAX_SEQ:
        return LLAMA3_LONG_SEQ_UNEXPRESSIBLE
    per_token = 6.0 * llama_params(row) + 6.0 * int(row["layers"]) * s * int(row["hidden"])
    return per_token * s * int(row["global_batch"]), {}


def nemo_llama_flops(row: dict[str, str], vocab: int, causal: bool = False) -> float:
    """NeMo's llama2/llama3 model FLOPs of one step (forward and backward, no recomputation)."""
    b, s, l, h = int(row["global_batch"]), int(row["seq"]), int(row["layers"]), int(row["hidden"])
    groups_per_head = int(row["kv_heads"] or row["heads"]) / int(row["heads"])
    attention = 12 * s / h * (0.5 if causal else 1.0)
    return b * s * l * h * h * (12 + 12 * groups_per_head + 18 * int(row["ffn"]) / h + attention
                                + 6 * vocab / (l * h))


def _sibling_flops_per_token(row: dict[str, str], rows: list[dict[str, str]]) -> float | None:
    """Model TFLOP/s / tokens/s of a row of the same table with the same model, sequence and GPUs."""
    table = row["source"].split(",")[0]
    for other in rows:  # the model's name without a bracketed variant note ("[alt variant in parentheses]")
        same = (_base_name(other["model"]) == _base_name(row["model"])
                and all(other.get(k) == row.get(k) for k in ("seq", "gpus", "gpu", "global_batch")))
        match = re.search(r"Model TFLOP/s/GPU=([\d.]+)", other.get("confidence", ""))
        if (same and other is not row and other["source"].split(",")[0] == table and match
                and other.get("reported_metric") == "tokens_per_s_per_gpu"):
            return float(match.group(1)) * 1e12 / float(other["reported_value"])
    return None


def _base_name(model: str) -> str:
    return re.sub(r"\s*\[[^]]*\]\s*$", "", model)


def _nemo_long_sequence(row: dict[str, str]) -> tuple[float, dict[str, str]] | str:
    source = row["source"]
    if "NeMo 24.03" in source:
        return nemo_llama_flops(row, NEMO_VOCAB["llama2"]), {}
    if "NeMo 25.04" in source:  # GPUs = TP x PP x CP x DP with the listed DP (SOURCE_FLOPS)
        listed = re.search(r"listed DP=(\d+) left out", row.get("confidence", ""))
        cells = {}
        if listed:
            dp = int(listed.group(1))
            cells = {"dp": str(dp), "gpus": str(int(row["tp"]) * int(row["pp"]) * int(row["cp"] or 1) * dp)}
        return nemo_llama_flops(row, NEMO_VOCAB["llama3"]), cells
    return "no FLOP formula known for this NeMo container"


def derive_iter_s(row: dict[str, str], rows: list[dict[str, str]]) -> dict[str, str] | str:
    """The row with ``iter_s`` (and any cells the derivation fixes) filled from its TFLOP/s, or the
    reason it cannot be; ``rows``: the whole table (for sibling rows)."""
    if row.get("reported_metric") != "tflops_per_gpu" or not row.get("reported_value"):
        return "no iteration time (the source gave neither step time, tokens/s nor TFLOP/s)"
    tflops = float(row["reported_value"])
    if "performance_long_sequence.md" in row["source"]:
        got = _nemo_long_sequence(row)
    elif row["source"].startswith("Llama 3 405B"):  # Meta's runs (Dubey et al. 2024, Table 4)
        got = _llama3_paper(row)
    else:
        per_token = _sibling_flops_per_token(row, rows)
        if per_token is None:
            return "no iteration time: the source gave only TFLOP/s and its FLOP count is not known"
        got = per_token * int(row["global_batch"]) * int(row["seq"]), {}
    if isinstance(got, str):
        return got
    flops, cells = got
    iter_s = flops / (tflops * 1e12 * int(cells.get("gpus", row["gpus"])))
    return {**row, **cells, "iter_s": f"{iter_s:.6g}"}
