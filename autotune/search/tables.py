"""Cost tables of stage choices: every layer count, pipeline position and micro-batch at once.

A stage's cost depends on its layer count n, whether it holds the embedding and/or the head
(its position: first, middle, last, or the only stage), its submesh and its choice; transformer
layers repeat, so one call of the cost model per (choice, position) covers every n and every
micro-batch size (the seed survey's closing note: prune and reuse across repeated layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.cost.contract import StageCostModel, phase_cost_models
from autotune.cost.stage import StagePosition
from autotune.errors import AutotuneError
from autotune.graph.table import ModelTables
from autotune.search.choices import StageChoice
from autotune.spec.runtime import Runtime
from autotune.spec.hardware import ClusterSpec

__all__ = ["POSITIONS", "EITHER_LINK", "ChoiceCosts", "SliceContext", "choice_costs", "best_by_inflight", "stage_plan_of"]

# choice_costs' inter_node for sends priced by the faster of the two links (a floor over both)
EITHER_LINK = "either"

# (has_embedding, has_head, neighbours) of each position index
POSITIONS = ((False, False, 2), (True, False, 1), (False, True, 1), (True, True, 0))
MIDDLE, FIRST, LAST, SINGLE = range(4)


@dataclass(frozen=True, kw_only=True, eq=False)
class SliceContext:
    """What is fixed while one data-parallel degree's stage choices are scored."""

    tables: ModelTables
    workload: object
    runtime: Runtime
    cluster: ClusterSpec
    dp: int
    micro_batches: tuple[int, ...]
    gpus: int
    overlap_tp_comm: bool = False

    @property
    def num_microbatches(self) -> np.ndarray:
        """Per micro-batch size; at least 1 (a floor's tables may hold sizes larger than a replica's batch)."""
        return np.array([max(1, self.workload.global_batch // (self.dp * b)) for b in self.micro_batches])[:, None]


@dataclass(frozen=True, kw_only=True, eq=False)
class ChoiceCosts:
    """Arrays indexed [micro-batch index, layer count n (0 unused), position]."""

    choice: StageChoice
    time_s: np.ndarray  # per micro-batch
    tail_s: np.ndarray  # per step: exposed gradient sync + optimizer
    mem_base_bytes: np.ndarray  # peak with no micro-batch in flight
    mem_per_microbatch_bytes: np.ndarray


def positions_needed(ctx: SliceContext, stage_gpus: int) -> list[int]:
    """Positions a stage of ``stage_gpus`` GPUs can take: the only stage when it has them all,
    else first and last, and middle when three stages fit."""
    if stage_gpus >= ctx.gpus:
        return [SINGLE]
    if ctx.gpus % stage_gpus:  # unequal submeshes (2 + 1 of 3 GPUs): a middle stage needs two others
        return [FIRST, LAST] + ([MIDDLE] if ctx.gpus - stage_gpus >= 2 * ctx.dp else [])
    stages = ctx.gpus // stage_gpus
    return [FIRST, LAST] + ([MIDDLE] if stages >= 3 else [])


# _phase_costers by what they read: the context's parts (by identity, each entry holding them),
# its degree, micro-batch sizes and TP overlap. A search makes a SliceContext per table it prices
# (DeepSeek-V3 on 2048 GPUs: 691) from a few degrees: one cost model each, whose context the
# FP8 variants' (cost/recompute.py fp8_context) and other caches by identity then find again.
_COSTERS: dict = {}
_COSTERS_KEPT = 256


def _phase_costers(ctx: SliceContext) -> list[tuple[float, StageCostModel]]:
    """(weight, cost model) per phase of the workload (autotune.cost.contract); its arrays read-only."""
    parts = (ctx.tables, ctx.workload, ctx.runtime, ctx.cluster)
    key = (*map(id, parts), ctx.dp, tuple(ctx.micro_batches), ctx.overlap_tp_comm)
    found = _COSTERS.get(key)
    if found is None or any(a is not b for a, b in zip(found[0], parts)):
        micro_batch, num_microbatches = np.array(ctx.micro_batches)[:, None], ctx.num_microbatches
        micro_batch.flags.writeable = num_microbatches.flags.writeable = False
        if len(_COSTERS) >= _COSTERS_KEPT:
            _COSTERS.pop(next(iter(_COSTERS)))  # the oldest
        found = _COSTERS[key] = (parts, phase_cost_models(
            ctx.tables, ctx.workload, ctx.cluster, runtime=ctx.runtime, micro_batch=micro_batch,
            num_microbatches=num_microbatches, overlap_tp_comm=ctx.overlap_tp_comm))
    return found[1]


@lru_cache(maxsize=8192)
def stage_plan_of(choice: StageChoice, dp: int, has_embedding: bool, has_head: bool,
                  layers: tuple[int, int] | None = None):
    """``choice.stage_plan(...)``, kept: a StagePlan validates itself, and a warm search asks for
    the same stages of a choice at every pipeline position, slice and GPU count (frozen: shared)."""
    return choice.stage_plan(dp=dp, layers=layers, has_embedding=has_embedding, has_head=has_head)


# A stage's HBM is affine in the micro-batches it holds (offload staging buffers add a constant),
# so it is scored with none and with one in flight at once (a leading axis of two).
_NONE_AND_ONE = np.array([0.0, 1.0]).reshape(2, 1, 1)


def _at_one(x) -> np.ndarray:
    x = np.asarray(x)
    return x[1] if x.ndim == 3 else x


def _stage_arrays(costers, stage, pos: StagePosition, n: np.ndarray) -> tuple[np.ndarray, ...]:
    """Weighted time, tail, HBM without and per in-flight micro-batch, over the phases."""
    time = tail = base = per = 0.0
    both = StagePosition(inflight=_NONE_AND_ONE, neighbors=pos.neighbors, p2p_inter_node=pos.p2p_inter_node)
    for weight, model in costers:
        cost = model.stage_cost(stage, both, num_layers=n)
        time = time + weight * _at_one(cost.time.microbatch_s)
        tail = tail + weight * _at_one(cost.time.step_tail_s)
        peak = np.broadcast_to(cost.memory.peak_bytes, (2,) + np.shape(_at_one(cost.time.microbatch_s)))
        base = np.maximum(base, peak[0])
        per = np.maximum(per, peak[1] - peak[0])
    return time, tail, base, per


def _memory_arrays(costers, stage, pos: StagePosition, n: np.ndarray, shape: tuple) -> tuple[np.ndarray, ...]:
    """_stage_arrays' memory alone (time and tail NaN: not priced), through each model's
    stage_memory (the same bytes as its stage_cost's, cost/contract.py)."""
    base = per = 0.0
    both = StagePosition(inflight=_NONE_AND_ONE, neighbors=pos.neighbors, p2p_inter_node=pos.p2p_inter_node)
    for _, model in costers:
        peak = np.broadcast_to(model.stage_memory(stage, both, num_layers=n).peak_bytes, (2,) + shape)
        base = np.maximum(base, peak[0])
        per = np.maximum(per, peak[1] - peak[0])
    return np.full(shape, np.nan), np.full(shape, np.nan), base, per


def choice_costs(ctx: SliceContext, choice: StageChoice, positions: list[int] | None = None,
                 inter_node: bool | str | None = None, memory_only: bool = False) -> ChoiceCosts:
    """Score ``choice`` for every micro-batch size, layer count and position (``positions``:
    those to price; by default those its pipelines can take, positions_needed); ``inter_node``:
    whether pipeline sends cross nodes (by default: when the stage spans a node or more;
    EITHER_LINK: by whichever link is faster, StagePosition's floor over both).
    ``memory_only``: the memory tables alone, the time and tail left NaN (a memory screen)."""
    num_layers = ctx.tables.model.num_layers
    n = np.arange(1, num_layers + 1)[None, :]
    costers = _phase_costers(ctx)
    size = choice.tp * choice.cp * ctx.dp
    inter = size >= ctx.cluster.gpus_per_node if inter_node is None else None if inter_node == EITHER_LINK else inter_node
    shape = (len(ctx.micro_batches), num_layers + 1, len(POSITIONS))
    arrays = {k: np.full(shape, np.inf) for k in ("time", "tail", "base", "per")}
    for index in positions_needed(ctx, size) if positions is None else positions:
        emb, head, neighbors = POSITIONS[index]
        pos = StagePosition(inflight=1.0, neighbors=neighbors, p2p_inter_node=inter)
        try:  # a choice this stage cannot take (a cache group that does not fit, ep x etp not dividing it)
            stage = stage_plan_of(choice, ctx.dp, emb, head)
            values = (_memory_arrays(costers, stage, pos, n, (len(ctx.micro_batches), num_layers)) if memory_only
                      else _stage_arrays(costers, stage, pos, n))
        except AutotuneError:
            continue
        for key, value in zip(("time", "tail", "base", "per"), values):
            arrays[key][:, 1:, index] = value
    return ChoiceCosts(choice=choice, time_s=arrays["time"], tail_s=arrays["tail"],
                       mem_base_bytes=arrays["base"], mem_per_microbatch_bytes=arrays["per"])


def best_by_inflight(costs: list[ChoiceCosts], b_index: int, num_microbatches: int, max_inflight: int,
                     capacity_bytes: float, pairs: tuple[tuple[int, int], ...] = (),
                     counts: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every (n, position, in-flight r = 1..max_inflight): the fitting choice that minimises
    its step contribution B * time + tail (the lowest index among equals). Returns (time, tail,
    choice index), indexed [n, position, r] (r = 0 unused); inf / -1 where nothing fits.

    Each (full, none) pair of ``pairs`` also stands for its full choice recomputing only the
    first k layers, for every k in ``counts`` (index len(costs) + pair * len(counts) + k's
    position): interpolated a block of counts at a time (cost/recompute.py), so memory stays
    bounded whatever the number of counts."""
    if len(costs) == 1 and not pairs:  # one choice (a uniform member's): it where it fits, as below
        return _one_by_inflight(costs[0], b_index, num_microbatches, max_inflight, capacity_bytes)
    time = np.stack([c.time_s[b_index] for c in costs])  # (C, n, pos)
    tail = np.stack([c.tail_s[b_index] for c in costs])
    base = np.stack([c.mem_base_bytes[b_index] for c in costs])
    per = np.stack([c.mem_per_microbatch_bytes[b_index] for c in costs])
    score = num_microbatches * time + tail
    found = _best_by_sorting(score, base, per, max_inflight, capacity_bytes) if max_inflight >= _SORT_FROM_DEPTH else None
    best, ok = found if found is not None else _best_by_scoring(score, base, per, max_inflight, capacity_bytes)
    n_idx, p_idx = np.ogrid[: time.shape[1], : time.shape[2]]
    pick = lambda a, i: np.where(ok, a[i, n_idx, p_idx], np.inf)  # noqa: E731
    out = {"time": pick(time, best), "tail": pick(tail, best), "score": pick(score, best), "index": np.where(ok, best, -1)}
    for p, (full, none) in enumerate(pairs):
        _merge_counts(out, costs[none], costs[full], b_index, num_microbatches, max_inflight, capacity_bytes, counts,
                      len(costs) + p * len(counts))
    order = (1, 2, 0)  # -> [n, pos, r]
    return out["time"].transpose(order), out["tail"].transpose(order), out["index"].transpose(order)


def _one_by_inflight(costs: ChoiceCosts, b_index: int, num_microbatches: int, max_inflight: int,
                     capacity_bytes: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """best_by_inflight of one choice: its time and tail where it fits r in flight and its score
    B * time + tail is finite (what the least over one choice reads), inf / -1 elsewhere."""
    time, tail = costs.time_s[b_index], costs.tail_s[b_index]
    r = np.arange(max_inflight + 1, dtype=float)[:, None, None]
    with np.errstate(invalid="ignore"):
        ok = _fits(costs.mem_base_bytes[b_index][None], costs.mem_per_microbatch_bytes[b_index][None], r, capacity_bytes)
        ok &= np.isfinite(num_microbatches * time + tail)
    order = (1, 2, 0)  # -> [n, pos, r]
    return (np.where(ok, time, np.inf).transpose(order), np.where(ok, tail, np.inf).transpose(order),
            np.where(ok, 0, -1).transpose(order))


def blend_counts(none: np.ndarray, full: np.ndarray, fraction: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """``none + fraction (full - none)`` where the count is below the layer count (``counted``), inf
    elsewhere (there the count is every layer: plain full recomputation, a choice of its own);
    ``fraction`` = count / layers broadcast over [count, n, 1] against tables [n, pos]."""
    finite = np.isfinite(none) & np.isfinite(full)
    with np.errstate(invalid="ignore"):  # inf - inf where not finite: masked below
        step = np.where(finite, full - none, 0.0)
    shape = np.broadcast_shapes(fraction.shape, none.shape, counted.shape)
    mixed = np.multiply(fraction, step, out=np.empty(shape))  # in place: [count, n, pos] is the largest
    mixed += none  # array of a search with every count (1,000 layers: 32 MB), made once, not thrice
    np.copyto(mixed, np.inf, where=~(counted & finite))
    return mixed


_COUNT_BLOCK_ELEMENTS = 1 << 22  # a block of counts scored at once holds about this many floats per array


def _merge_counts(out: dict, none: ChoiceCosts, full: ChoiceCosts, b_index: int, num_microbatches: int,
                  max_inflight: int, capacity_bytes: float, counts: tuple[int, ...], first_index: int) -> None:
    """Fold the counts of one (full, none) pair into the running best (strictly better only: a
    lower index wins a tie)."""
    n = np.arange(full.time_s.shape[1], dtype=float)[None, :, None]
    size = max(1, _COUNT_BLOCK_ELEMENTS // ((max_inflight + 1) * full.time_s[b_index].size))
    for start in range(0, len(counts), size):
        k = np.asarray(counts[start:start + size], dtype=float)[:, None, None]
        counted = n > k
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.where(counted, k / np.maximum(n, 1.0), 1.0)
        time, tail, base, per = (blend_counts(getattr(none, name)[b_index], getattr(full, name)[b_index], f, counted)
                                 for name in ("time_s", "tail_s", "mem_base_bytes", "mem_per_microbatch_bytes"))
        score = num_microbatches * time + tail
        best, ok = _best_by_scoring(score, base, per, max_inflight, capacity_bytes)
        n_idx, p_idx = np.ogrid[: time.shape[1], : time.shape[2]]
        found = np.where(ok, score[best, n_idx, p_idx], np.inf)
        better = found < out["score"]
        out["score"] = np.where(better, found, out["score"])
        out["time"] = np.where(better, time[best, n_idx, p_idx], out["time"])
        out["tail"] = np.where(better, tail[best, n_idx, p_idx], out["tail"])
        out["index"] = np.where(better, first_index + start + best, out["index"])


# From this depth on the sorted search beats scoring every depth (measured on GPT-3 175B's tables).
_SORT_FROM_DEPTH = 24


def _fits(base: np.ndarray, per: np.ndarray, r, capacity_bytes: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf * 0 at n = 0, which never fits anyway
        return base + r * per <= capacity_bytes


def _best_by_scoring(score, base, per, max_inflight: int, capacity_bytes: float):
    """(choice index, whether one fits) per [r, n, pos]: every r scored over every choice."""
    r = np.arange(max_inflight + 1, dtype=float)[:, None, None, None]  # (R, 1, 1, 1)
    scores = np.where(_fits(base[None], per[None], r, capacity_bytes), score[None], np.inf)  # (R, C, n, pos)
    return np.argmin(scores, axis=1), np.isfinite(np.min(scores, axis=1))


def _best_by_sorting(score, base, per, max_inflight: int, capacity_bytes: float):
    """_best_by_scoring's answer without an (R, C, n, pos) array: memory grows with r (per >= 0),
    so each choice fits up to a depth r_max; in each (n, pos) the best at r is the first choice in
    order of score (stable: the lowest index among equals) whose r_max >= r, found by binary
    search over the running maximum of r_max. None where that does not hold exactly (a negative
    per-micro-batch memory, NaN scores, or a depth estimate that the exact test does not confirm)."""
    R = max_inflight + 1
    if np.isnan(score).any() or np.isnan(base).any() or np.isnan(per).any() or (per < 0).any():
        return None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        fixed = np.where(base <= capacity_bytes, R - 1.0, -1.0)  # per == 0: every depth or none
        guess = np.where(per > 0, np.floor((capacity_bytes - base) / np.where(per > 0, per, 1.0)), fixed)
    r_max = np.clip(np.nan_to_num(guess, nan=-1.0, posinf=R - 1.0, neginf=-1.0), -1, R - 1).astype(int)
    for _ in range(2):  # the division may be off by one either way: settle on the exact test
        up = (r_max < R - 1) & _fits(base, per, r_max + 1.0, capacity_bytes)
        r_max = r_max + up
        down = (r_max >= 0) & ~_fits(base, per, r_max.astype(float), capacity_bytes)
        r_max = r_max - down
    fits_top = (r_max < 0) | _fits(base, per, r_max.astype(float), capacity_bytes)
    fails_next = (r_max >= R - 1) | ~_fits(base, per, r_max + 1.0, capacity_bytes)
    if not (fits_top.all() and fails_next.all()):
        return None
    C, cols = score.shape[0], score.shape[1] * score.shape[2]
    order = np.argsort(score.reshape(C, cols), axis=0, kind="stable")  # (C, cols)
    reach = np.maximum.accumulate(np.take_along_axis(r_max.reshape(C, cols), order, axis=0), axis=0)
    offset = np.arange(cols) * (R + 1)  # columns laid end to end, each increasing, for one search
    first = np.searchsorted((reach + offset).T.ravel(), (np.arange(R)[:, None] + offset).ravel(), side="left")
    first = first.reshape(R, cols) - np.arange(cols) * C  # (R, cols): rank of the best choice, C if none
    some = first < C
    best = np.take_along_axis(order, np.minimum(first, C - 1), axis=0)  # (R, cols)
    ok = some & np.isfinite(np.take_along_axis(score.reshape(C, cols), best, axis=0))
    shape = (R,) + score.shape[1:]
    return best.reshape(shape), ok.reshape(shape)
