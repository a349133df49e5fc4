"""Stage choices grouped for bounding, and partial recomputation counts scored from two tables.

A *class* is the choices of a stage that differ only in what trades time for memory:
recomputation (none, selective, full, full on the first N layers), ZeRO 0-2 (the same kernels
and collectives per micro-batch; the step's tail and the memory differ) and offloading. Its
*representative* is the class member with nothing traded: no recomputation, ZeRO 0 (or ZeRO 3,
a class of its own: its weights are gathered per micro-batch) and nothing offloaded. Each of
these adds work to a micro-batch, so the representative's stage time is a floor for every
member (tests/test_search_bounds.py checks this against the cost model), and a stage's time
per micro-batch does not fall as the data-parallel degree grows (gradient and ZeRO groups only
get larger): one representative priced at the smallest data-parallel degree bounds the class at
every degree, before any member is priced. Cheaper still, the representative's *bare* stage (no
embedding, no head, no pipeline neighbour: bare_times) floors its time at every position: the
embedding and the head only add work and the sends only add time (tests/test_search_bounds.py
checks it against every member of small cases' classes at every degree and position).

Partial recomputation (the first N layers of a stage fully recomputed) costs the interpolation
``none + min(N, n) / n * (full - none)`` of its stage's tables without and with full
recomputation (autotune/cost/recompute.py), so a count's table is made from two priced ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from autotune.cost.stage import StagePosition
from autotune.errors import AutotuneError
from autotune.search.bounds import interleaved_floor_s, pipeline_floor_s
from autotune.search.choices import StageChoice
from autotune.search.tables import ChoiceCosts, SliceContext, _phase_costers, blend_counts, stage_plan_of

__all__ = ["Member", "representative", "bare_times", "lays_out", "count_costs", "member_floors", "screen_floors",
           "count_floors", "class_member_floors", "bare_floors"]

# placements that trade time for memory: folded into the class representative (no offload)
_OFFLOAD_FIELDS = ("optimizer_in", "gradients_in", "weights_in", "activations_in")


@dataclass(frozen=True, kw_only=True)
class Member:
    """One uniform choice of a slice's stages: its tables, its submesh, and its rank (the order
    in which equal objectives are settled: submesh, then choice as enumerated, then count)."""

    rank: tuple[int, int, int]
    model_parallel: int
    costs: ChoiceCosts


def representative(choice: StageChoice) -> StageChoice:
    """The class representative of ``choice``: no recomputation, nothing offloaded, ZeRO 0
    unless it is ZeRO 3 (then its FSDP sharding variant stays: it sets the per-micro-batch
    gathers)."""
    zero3 = choice.zero >= 3
    kept = tuple((k, v) for k, v in choice.placements if k not in _OFFLOAD_FIELDS and zero3)
    return replace(choice, recompute="none", recompute_layers=0, zero=3 if zero3 else 0, placements=kept)


def bare_times(ctx: SliceContext, choice: StageChoice) -> np.ndarray:
    """[micro-batch, n]: the time of a micro-batch through a stage of ``n`` layers of ``choice``
    with no embedding, no head and no pipeline neighbour (inf where the choice cannot be laid out
    on the degree): a floor on its time at every pipeline position (autotune.search.screens' note)."""
    num_layers = ctx.tables.model.num_layers
    out = np.full((len(ctx.micro_batches), num_layers + 1), np.inf)
    models = _phase_costers(ctx)
    bare, n = StagePosition(inflight=1.0, neighbors=0, p2p_inter_node=None), np.arange(1, num_layers + 1)[None, :]
    try:  # as choice_costs: a choice this stage cannot take is priced nowhere
        stage = stage_plan_of(choice, ctx.dp, False, False)  # kept: the middle stage choice_costs prices
        out[:, 1:] = sum(w * np.asarray(m.stage_cost(stage, bare, num_layers=n).time.microbatch_s) for w, m in models)
    except AutotuneError:
        pass
    return out


@lru_cache(maxsize=4096)  # asked again by every search of the same choices (a scheduler's GPU counts)
def lays_out(choice: StageChoice, dp: int) -> bool:
    """Whether a stage of ``choice`` at degree ``dp`` is a valid StagePlan (its members share its
    degrees: those that differ only trade time for memory)."""
    try:
        stage_plan_of(choice, dp, False, False)  # kept: the bare and middle stages priced later
    except AutotuneError:
        return False
    return True


_TABLES = ("time_s", "tail_s", "mem_base_bytes", "mem_per_microbatch_bytes")


def _fractions(counts, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(count / n, n > count) over [count, n, 1]."""
    k = np.asarray(counts, dtype=float).reshape(-1, 1, 1)
    n = np.arange(num_rows, dtype=float)[None, :, None]
    counted = n > k
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counted, k / np.maximum(n, 1.0), 1.0), counted


def count_costs(none: ChoiceCosts, full: ChoiceCosts, count: int) -> ChoiceCosts:
    """The tables of ``full``'s choice recomputing only the first ``count`` layers of a stage:
    interpolated where the stage has more layers than ``count``, inf elsewhere (there it is
    plain full recomputation, a member of its own)."""
    f, counted = _fractions([count], full.time_s.shape[1])
    arrays = {name: blend_counts(getattr(none, name), getattr(full, name), f, counted)
              for name in ("time_s", "tail_s", "mem_base_bytes", "mem_per_microbatch_bytes")}
    return ChoiceCosts(choice=replace(full.choice, recompute_layers=count), **arrays)


def _floors(time, tail, base, per, capacity_bytes: float, shape: tuple[int, int, int, int, int],
            side: int | None = None) -> tuple:
    """(1F1B floor, interleaved score or inf) of tables [..., n, pos]; ``shape``: (layers, stages,
    micro-batches, chunks per rank, micro-batches an interleaved stage holds). ``side`` 0 or 1:
    only that floor is made (the other is NaN: a caller ordering one schedule's candidates
    reads only its own)."""
    num_layers, num_stages, num_mb, chunks, inflight = shape
    if side == 1:
        plain = np.full(time.shape[:-2], np.nan)
    else:
        plain = pipeline_floor_s(time, tail, base, per, capacity_bytes, num_layers, num_stages, num_mb)
    if chunks <= 1:
        return plain, np.full_like(plain, np.inf)
    if side == 0:
        return plain, np.full_like(plain, np.nan)
    return plain, interleaved_floor_s(time, base, per, capacity_bytes, num_layers, num_stages, num_mb, chunks, inflight)


def member_floors(costs: list[ChoiceCosts], b_index: int, capacity_bytes: float, shape: tuple,
                  side: int | None = None) -> tuple:
    """(1F1B, interleaved) floors (arrays over ``costs``) of priced members at micro-batch
    ``b_index`` (``shape`` and ``side`` as _floors)."""
    time, tail, base, per = (np.stack([getattr(c, name)[b_index] for c in costs])
                             for name in ("time_s", "tail_s", "mem_base_bytes", "mem_per_microbatch_bytes"))
    return _floors(time, tail, base, per, capacity_bytes, shape, side)


def screen_floors(time: np.ndarray, base: np.ndarray, per: np.ndarray, capacity_bytes: float, shape: tuple) -> tuple:
    """(1F1B, interleaved) floors of classes from their screens: tables [class, n, pos] of the
    representatives' times and the leanest members' memory (no tail: members' tails differ)."""
    return _floors(time, np.zeros_like(time), base, per, capacity_bytes, shape)


def bare_floors(time: np.ndarray, num_layers: int, num_stages: int, num_microbatches: np.ndarray,
                chunks: np.ndarray) -> tuple:
    """screen_floors of times alone (no tail, no memory: everything fits) over rows [row, n, pos]
    that each have their own micro-batch count and chunks per rank (the slices of one degree and
    submesh: their micro-batch sizes differ), in one pass: the floors are made row by row, so they
    are the numbers of one call per slice."""
    zeros = np.zeros_like(time)
    plain = pipeline_floor_s(time, zeros, zeros, zeros, np.inf, num_layers, num_stages, num_microbatches)
    inter = np.full(plain.shape, np.inf)
    laid = chunks > 1  # the others have no interleaved layout
    if laid.any():
        inter[laid] = interleaved_floor_s(time[laid], zeros[laid], zeros[laid], np.inf, num_layers, num_stages,
                                          num_microbatches[laid], chunks[laid], 1)
    return plain, inter


def count_floors(none: ChoiceCosts, full: ChoiceCosts, counts: np.ndarray, b_index: int, capacity_bytes: float,
                 shape: tuple, side: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """member_floors of every count at once (arrays over ``counts``), without making each
    count's tables: the interpolation over a [count, n, pos] grid at one micro-batch size. A count's
    tables are inf for stages of at most ``count`` layers (they recompute every layer: plain full
    recomputation, a member of its own), so every stage of its plans holds more, which S stages of
    L layers can only where S (count + 1) <= L: the other counts have no plan (inf floors), and
    only those are scored."""
    counts = np.asarray(counts)
    plains, inters = np.full(counts.shape, np.inf), np.full(counts.shape, np.inf)
    partial = counts < shape[0] // shape[1]
    if partial.any():
        f, counted = _fractions(counts[partial], full.time_s.shape[1])
        # the four tables blended in one pass (elementwise the same as one at a time)
        none_at, full_at = (np.stack([getattr(c, name)[b_index] for name in _TABLES])[:, None] for c in (none, full))
        time, tail, base, per = blend_counts(none_at, full_at, f[None], counted[None])
        plains[partial], inters[partial] = _floors(time, tail, base, per, capacity_bytes, shape, side)
    return plains, inters


def class_member_floors(costs: list[ChoiceCosts], pairs: list[tuple[ChoiceCosts, ChoiceCosts]], counts, b_index: int,
                        capacity_bytes: float, shape: tuple, side: int | None = None) -> tuple:
    """member_floors of ``costs`` and count_floors of each (none, full) of ``pairs`` (over
    ``counts``), made in one pass over their tables stacked: the floors are made row by row, so
    they are the numbers of one call each, at the per-call cost of one (a class's members and
    its full-recomputation members' counts, three calls a class before). (plains, inters) of the
    members, and a list of them per pair."""
    rows = [[np.stack([getattr(c, name)[b_index] for c in costs]) for name in _TABLES]]
    counts = np.asarray(counts)
    partial = counts < shape[0] // shape[1]
    if pairs and partial.any():
        f, counted = _fractions(counts[partial], costs[0].time_s.shape[1])
        for none, full in pairs:
            none_at, full_at = (np.stack([getattr(c, name)[b_index] for name in _TABLES])[:, None] for c in (none, full))
            rows.append(list(blend_counts(none_at, full_at, f[None], counted[None])))
    plain, inter = _floors(*(np.concatenate(column) for column in zip(*rows)), capacity_bytes, shape, side)
    m, k = len(costs), int(partial.sum())
    out = []
    for j in range(len(pairs)):
        plains, inters = np.full(counts.shape, np.inf), np.full(counts.shape, np.inf)
        if len(rows) > 1:
            plains[partial], inters[partial] = plain[m + j * k:m + (j + 1) * k], inter[m + j * k:m + (j + 1) * k]
        out.append((plains, inters))
    return plain[:m], inter[:m], out
