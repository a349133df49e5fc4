"""When each pipeline rank runs each micro-batch's forward and backward: a list-scheduling
simulation of GPipe, 1F1B and interleaved 1F1B, for timeline plots.

Each rank runs its operations in the schedule's order, each as soon as the rank is free and its
input is ready (the previous rank's forward, the next rank's backward). The orders follow
Megatron-LM's schedules (megatron/core/pipeline_parallel/schedules.py): 1F1B warms up with
``S - s - 1`` forwards on rank ``s``; the interleaved schedule takes micro-batches in groups of
``N`` (``--microbatch-group-size-per-virtual-pipeline-stage``, default ``S``), runs each group
through chunk 0, 1, ... and warms up with ``2 (S - s - 1) + (v - 1) N`` forwards (Narayanan et
al. SC'21 sec. 2.2). Megatron-LM needs ``S <= N <= M`` and a last group of 0 or at least ``S``
micro-batches. Point-to-point transfer time is not drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.errors import require, require_choice, require_positive

__all__ = ["Block", "simulate_schedule", "stage_order", "interleaved_group_size"]

Op = tuple[str, int, int]  # (kind "F" or "B", micro-batch, chunk)


@dataclass(frozen=True, kw_only=True)
class Block:
    """One forward ("F") or backward ("B") of ``microbatch`` through ``chunk`` on rank ``stage``."""

    stage: int
    microbatch: int
    chunk: int
    kind: str
    start_s: float
    end_s: float


def interleaved_group_size(num_stages: int, num_microbatches: int) -> int:
    """The smallest micro-batch group Megatron-LM's interleaved schedule accepts: at least the stage
    count, dividing the micro-batches or leaving a last group of at least the stage count."""
    require(num_microbatches >= num_stages, "num_microbatches",
            f"the interleaved schedule needs at least as many micro-batches as stages "
            f"({num_microbatches} < {num_stages})")
    return next(n for n in range(num_stages, num_microbatches + 1)
                if num_microbatches % n == 0 or num_microbatches % n >= num_stages)


def _virtual_order(group_size: int, num_microbatches: int, vpp: int, backward: bool) -> list[tuple[int, int]]:
    """(micro-batch, chunk) in the interleaved schedule's order, groups of ``group_size`` micro-batches."""
    order = []
    for first in range(0, num_microbatches, group_size):
        group = range(first, min(first + group_size, num_microbatches))
        chunks = reversed(range(vpp)) if backward else range(vpp)
        order += [(m, c) for c in chunks for m in group]
    return order


def stage_order(stage: int, num_stages: int, num_microbatches: int, schedule: str, vpp: int = 1) -> list[Op]:
    """The operations rank ``stage`` runs, in order."""
    if schedule == "gpipe":
        return [("F", m, 0) for m in range(num_microbatches)] + [("B", m, 0) for m in range(num_microbatches)]
    if schedule == "interleaved":
        chunks, group = vpp, interleaved_group_size(num_stages, num_microbatches)
        warmup = (num_stages - stage - 1) * 2 + (chunks - 1) * group
    else:
        chunks, group = 1, num_microbatches
        warmup = num_stages - stage - 1
    forwards = _virtual_order(group, num_microbatches, chunks, backward=False)
    backwards = _virtual_order(group, num_microbatches, chunks, backward=True)
    warmup = min(warmup, len(forwards))
    ops: list[Op] = [("F", m, c) for m, c in forwards[:warmup]]
    for (fm, fc), (bm, bc) in zip(forwards[warmup:], backwards):
        ops += [("F", fm, fc), ("B", bm, bc)]
    ops += [("B", m, c) for m, c in backwards[len(forwards) - warmup:]]
    return ops


def _dependency(op: Op, stage: int, num_stages: int, chunks: int) -> tuple[str, int, int, int] | None:
    """(kind, stage, micro-batch, chunk) that must finish before ``op`` on ``stage`` starts."""
    kind, m, c = op
    if kind == "F":
        if stage > 0:
            return "F", stage - 1, m, c
        return ("F", num_stages - 1, m, c - 1) if c > 0 else None
    if stage < num_stages - 1:
        return "B", stage + 1, m, c
    return ("B", 0, m, c + 1) if c < chunks - 1 else ("F", stage, m, c)


def simulate_schedule(fwd_s: Sequence[float], bwd_s: Sequence[float], num_microbatches: int,
                      schedule: str, vpp: int = 1) -> list[Block]:
    """Blocks of every rank; ``fwd_s[i]``/``bwd_s[i]`` are rank ``i``'s times for one micro-batch
    through all its layers (a chunk takes ``1/vpp`` of them)."""
    require_choice("schedule", schedule, ("1f1b", "gpipe", "interleaved"))
    require_positive("num_microbatches", num_microbatches)
    require(len(fwd_s) == len(bwd_s) > 0, "stages", "give one forward and one backward time per stage")
    num_stages = len(fwd_s)
    chunks = vpp if schedule == "interleaved" else 1
    orders = [stage_order(s, num_stages, num_microbatches, schedule, chunks) for s in range(num_stages)]
    done: dict[tuple[str, int, int, int], float] = {}
    free = [0.0] * num_stages
    nxt = [0] * num_stages
    blocks: list[Block] = []
    while len(blocks) < sum(len(o) for o in orders):
        progressed = False
        for s in range(num_stages):
            while nxt[s] < len(orders[s]):
                kind, m, c = orders[s][nxt[s]]
                dep = _dependency((kind, m, c), s, num_stages, chunks)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                end = start + (fwd_s[s] if kind == "F" else bwd_s[s]) / chunks
                done[(kind, s, m, c)] = free[s] = end
                blocks.append(Block(stage=s, microbatch=m, chunk=c, kind=kind, start_s=start, end_s=end))
                nxt[s] += 1
                progressed = True
        if not progressed:  # the orders above never wait on each other in a cycle
            raise RuntimeError(f"{schedule} schedule stalled: stages {num_stages}, micro-batches {num_microbatches}")
    return blocks
