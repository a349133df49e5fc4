"""A serving engine's measured kernel rows (spec/serving_engine.py ServingEngine: decode_attention,
prefill_attention, mla_decode_attention, mla_prefill_attention, mla_bmm; each preset row cites its
measurement): their checks, and the row a GPU reads.

A lookup takes the GPU's keys most specific first (cost/runtime_kernels.py gpu_keys) and answers the first
key's row; None where no key has one (the caller then prices the op generically).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.errors import require

if TYPE_CHECKING:
    from autotune.spec.serving_engine import ServingEngine

__all__ = ["check_kernel_rows", "decode_attention_row", "prefill_attention_row", "mla_row"]


def _kv_dtype(kv_bytes: float) -> str:
    """The KV cache dtype a row names for ``kv_bytes`` per element ("" where no row can name it)."""
    return {1.0: "fp8", 2.0: "bf16"}.get(float(kv_bytes), "")


def decode_attention_row(rows: tuple, gpu_keys: tuple[str, ...], kv_bytes: float) -> tuple[float, float, float] | None:
    """(latency_s, seconds per sequence x KV head, knee: the sequences x KV heads that cost nothing beyond the
    latency, 0 where the row states none) of the decode_attention ``rows`` for the first of ``gpu_keys`` with a
    row at the KV dtype of ``kv_bytes`` per element; None where none has."""
    dtype = _kv_dtype(kv_bytes)
    table = {(gpu, kv): (lat, per_head, float(knee[0]) if knee else 0.0) for gpu, kv, lat, per_head, *knee in rows}
    return next((table[(key, dtype)] for key in gpu_keys if (key, dtype) in table), None)


def prefill_attention_row(rows: tuple, gpu_keys: tuple[str, ...], head_dim: int) -> tuple[float, ...] | None:
    """(latency_s, seconds per causal FLOP[, seconds per prompt token x query width]) of the prefill_attention
    ``rows`` for the first of ``gpu_keys`` with a row at ``head_dim``; None where none has."""
    table = {(gpu, dim): tuple(values) for gpu, dim, *values in rows}
    return next((table[(key, head_dim)] for key in gpu_keys if (key, head_dim) in table), None)


def mla_row(rows: tuple, gpu_keys: tuple[str, ...], kv_bytes: float, heads: int) -> tuple[float, float, float] | None:
    """The (latency_s, s per unit, s per unit) of ``rows`` for the first of ``gpu_keys`` with a row at the KV
    dtype of ``kv_bytes`` per element and ``heads`` query heads a GPU; None where none has."""
    dtype = _kv_dtype(kv_bytes)
    table = {(gpu, kv, h): tuple(r) for gpu, kv, h, *r in rows}
    return next((table[(key, dtype, heads)] for key in gpu_keys if (key, dtype, heads) in table), None)


def check_kernel_rows(engine: ServingEngine) -> None:
    """Refuse malformed or repeated rows in ``engine``'s measured kernel tables."""
    _check_decode_rows(engine)
    _check_prefill_rows(engine)


def _check_decode_rows(engine: ServingEngine) -> None:
    rows = engine.decode_attention
    require(all(isinstance(r, tuple) and len(r) in (4, 5) and isinstance(r[0], str) and r[1] in ("bf16", "fp8")
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1 for v in r[2:4])
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in r[4:])
                for r in rows) and len({r[:2] for r in rows}) == len(rows), "serving.decode_attention",
            f"must be distinct [GPU key, 'bf16' or 'fp8', latency_s, seconds per sequence x KV head(, knee in "
            f"sequences x KV heads)] rows, got {rows!r}")
    for name, per in (("mla_decode_attention", "s per sequence, s per position"),
                      ("mla_prefill_attention", "s per token, s per pair")):
        mla = getattr(engine, name)
        require(all(isinstance(r, tuple) and len(r) == 6 and isinstance(r[0], str) and r[1] in ("bf16", "fp8")
                    and isinstance(r[2], int) and r[2] >= 1
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1 for v in r[3:])
                    for r in mla) and len({r[:3] for r in mla}) == len(mla), f"serving.{name}",
                f"must be distinct [GPU key, 'bf16' or 'fp8', heads, latency_s, {per}] rows, got {mla!r}")
    require(all(len(r) == 5 and r[1] in ("bf16", "fp8") and isinstance(r[2], int) and all(0 <= v < 1 for v in r[3:])
                for r in engine.mla_bmm), "serving.mla_bmm", f"must be [GPU key, 'bf16' or 'fp8', heads, latency_s, "
            f"seconds per token] rows, got {engine.mla_bmm!r}")


def _check_prefill_rows(engine: ServingEngine) -> None:
    rows = engine.prefill_attention
    require(all(isinstance(r, tuple) and len(r) in (4, 5) and isinstance(r[0], str) and isinstance(r[1], int)
                and r[1] > 0 and all(isinstance(v, float) and 0 < v < 1 for v in r[2:])
                for r in rows) and len({r[:2] for r in rows}) == len(rows), "serving.prefill_attention",
            f"must be distinct [GPU key, head_dim, latency_s, seconds per FLOP(, seconds per token x query width)] "
            f"rows, got {rows!r}")
