"""Pipeline schedules: step time from per-stage micro-batch times, and activation memory.

GPipe (Huang et al. 2019) and 1F1B (PipeDream-Flush, Narayanan et al. 2021) take the same
time, sum(t_i) + (B - 1) * max(t_i) for B micro-batches (Alpa's stage-construction objective,
Zheng et al. 2022 eq. 1); GPipe keeps all B micro-batches' activations, 1F1B at most S - i on
stage i. The interleaved schedule (Narayanan et al. SC'21 sec. 2.2) splits each rank's layers
into v chunks, dividing the bubble by v: sum(t_i)/v + (B - 1/v) * max(t_i), which for equal
stages is B t + (S - 1) t / v; stage i then holds (2 (S - i - 1) + (v - 1) S + 1) / v
micro-batches' worth of activations (Megatron-LM's warm-up count; S + (S-1)/v on the first
stage, Korthikanti et al. 2022 sec. 4.2.3).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["pipeline_time_s", "inflight_microbatches", "bubble_s"]


def pipeline_time_s(stage_times_s: Sequence[float], num_microbatches: int, schedule: str, vpp: int = 1) -> float:
    """Time from the first forward to the last backward of one step."""
    slowest = max(stage_times_s)
    chunks = vpp if schedule == "interleaved" else 1
    return sum(stage_times_s) / chunks + (num_microbatches - 1.0 / chunks) * slowest


def bubble_s(stage_times_s: Sequence[float], num_microbatches: int, schedule: str, vpp: int = 1) -> float:
    """Pipeline time not spent on the slowest stage's own micro-batches."""
    return pipeline_time_s(stage_times_s, num_microbatches, schedule, vpp) - num_microbatches * max(stage_times_s)


def inflight_microbatches(stage_index: int, num_stages: int, num_microbatches: int,
                          schedule: str, vpp: int = 1) -> float:
    """Micro-batches whose activations stage ``stage_index`` (0 = first) holds at its peak."""
    if schedule == "gpipe":
        return float(num_microbatches)
    if schedule == "interleaved":
        warmup_chunks = 2 * (num_stages - stage_index - 1) + (vpp - 1) * num_stages + 1
        return min(float(num_microbatches), warmup_chunks / vpp)
    return float(min(num_stages - stage_index, num_microbatches))
