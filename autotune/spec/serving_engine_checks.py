"""The value checks of a ServingEngine (spec/serving_engine.py runs them from __post_init__, after it checks its
named choices beside their tuples): counts, numbers, list-valued settings, SGLang's output reserve and the measured
kernel rows (spec/serving_kernel_rows.py). Each failure names the setting as ``serving.<name>``."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from autotune.errors import require
from autotune.spec.serving_kernel_rows import check_kernel_rows

if TYPE_CHECKING:
    from autotune.spec.serving_engine import ServingEngine

__all__ = ["check_values"]

_WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "nvfp4", "mxfp4")


def check_values(engine: ServingEngine) -> None:
    """Every value check of ``engine``, in the order its settings are reported."""
    _check_counts_and_numbers(engine)
    _check_prompt_encode(engine)
    sizes = engine.decode_graph_batch_sizes
    require(all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in sizes) and list(sizes) == sorted(set(sizes)),
            "serving.decode_graph_batch_sizes", f"must be increasing whole numbers >= 1, got {sizes!r}")
    check_kernel_rows(engine)
    require(isinstance(engine.eager_op_host_scale, (int, float)) and engine.eager_op_host_scale > 0,
            "serving.eager_op_host_scale", f"must be a number > 0, got {engine.eager_op_host_scale!r}")
    if engine.admission == "reserve_output":
        _check_output_reserve(engine)
    require(isinstance(engine.memory_fraction, (int, float)) and 0 <= engine.memory_fraction <= 1
            and (engine.memory_fraction > 0) == (engine.memory_rule not in ("reserved", "sglang_reserve")), "serving.memory_fraction",
            f"must be in (0, 1] (0 only with memory_rule 'reserved'), got {engine.memory_fraction!r}")
    _check_lists(engine)
    for f in fields(engine):
        if f.type == "bool":
            require(isinstance(getattr(engine, f.name), bool), f"serving.{f.name}", "must be true or false")


def _check_lists(engine: ServingEngine) -> None:
    require(all(isinstance(t, int) and t >= 1 and 0 < f <= 1 for t, f in engine.memory_fraction_by_tp),
            "serving.memory_fraction_by_tp", f"must be [smallest tp, fraction] pairs, got {engine.memory_fraction_by_tp!r}")
    require(len(engine.weight_dtypes) > 0 and all(d in _WEIGHT_DTYPES for d in engine.weight_dtypes),
            "serving.weight_dtypes", f"must be a non-empty list of {', '.join(_WEIGHT_DTYPES)}")
    require(engine.mxfp4_weight_only_pad == () or (len(engine.mxfp4_weight_only_pad) == 2 and all(
        isinstance(m, int) and m >= 1 for m in engine.mxfp4_weight_only_pad)), "serving.mxfp4_weight_only_pad",
        f"must be [hidden multiple, intermediate multiple] (whole numbers >= 1) or empty, got {engine.mxfp4_weight_only_pad!r}")
    require(engine.default_weight_dtype in engine.weight_dtypes, "serving.default_weight_dtype",
            f"must be one of its weight_dtypes {list(engine.weight_dtypes)}, got {engine.default_weight_dtype!r}")


def _check_counts_and_numbers(engine: ServingEngine) -> None:
    for name in ("max_num_seqs", "max_num_batched_tokens", "launch_max_num_seqs", "launch_max_num_batched_tokens",
                 "max_model_len", "prefill_chunk_tokens",
                 "decode_cuda_graph_max_batch", "retract_decode_steps", "clip_max_new_tokens",
                 "adp_batching_wait_iters", "adp_timeout_iters"):
        _require_count(name, getattr(engine, name), minimum=0)
    for name in ("kv_block_tokens", "scheduler_steps", "scheduler_recv_interval"):
        _require_count(name, getattr(engine, name), minimum=1)
    for name in ("step_host_s", "step_host_share", "step_host_s_per_seq", "output_host_s", "output_host_s_per_seq",
                 "frontend_s_per_seq", "frontend_intake_s", "frontend_intake_before_send", "client_request_s", "stream_token_s",
                 "memory_reserved_bytes", "rate_run_s",
                 "new_token_ratio_init", "new_token_ratio_min", "new_token_ratio_decay", "logits_gather_copy_bytes"):
        _require_number(name, getattr(engine, name))
    for value in engine.sampler_pass_bytes:
        _require_number("sampler_pass_bytes", value)


def _check_output_reserve(engine: ServingEngine) -> None:
    require(engine.kv_reservation == "grow" and engine.scheduler == "prefill_first", "serving.admission",
            "'reserve_output' is SGLang's rule: it needs kv_reservation 'grow' and scheduler 'prefill_first'")
    require(0 < engine.new_token_ratio_min <= engine.new_token_ratio_init <= 1, "serving.new_token_ratio_init",
            f"must satisfy 0 < new_token_ratio_min <= new_token_ratio_init <= 1 under admission 'reserve_output', "
            f"got {engine.new_token_ratio_min!r} and {engine.new_token_ratio_init!r}")
    for name in ("retract_decode_steps", "clip_max_new_tokens"):
        _require_count(name, getattr(engine, name), minimum=1)


def _check_prompt_encode(engine: ServingEngine) -> None:
    points = engine.prompt_encode_s
    require(all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], int) and p[0] >= 1
                and isinstance(p[1], (int, float)) and 0 <= p[1] < float("inf") for p in points)
            and all(a[0] < b[0] for a, b in zip(points, points[1:])), "serving.prompt_encode_s",
            f"must be [prompt tokens, seconds] pairs, tokens >= 1 and increasing, seconds >= 0; got {points!r}")


def _require_count(name: str, value: object, *, minimum: int) -> None:
    require(isinstance(value, int) and not isinstance(value, bool) and value >= minimum, f"serving.{name}",
            f"must be an integer >= {minimum}, got {value!r}")


def _require_number(name: str, value: object) -> None:
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf"),
            f"serving.{name}", f"must be a finite number >= 0, got {value!r}")
