"""The floors that let the uniform-stage search skip work: never above what they bound.

Pure floors (autotune.search.bounds) against brute force on random tables, and the cost-model
facts the shared screens rest on (autotune.search.members, screens): a class's representative is
no slower than its members, a stage's time does not fall as the data-parallel degree grows, and
the leanest members' memory at the largest degree is no more than any member's."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from autotune.search.bounds import interleaved_floor_s, least_slowest_s, pipeline_floor_s, positions_of
from autotune.search.driver import SearchProblem, SliceSearch
from autotune.search.members import count_costs, count_floors, member_floors, representative
from autotune.search.screens import _leanest, price_positions
from autotune.search.space import load_space
from autotune.search.tables import EITHER_LINK, FIRST, LAST, MIDDLE, SINGLE, ChoiceCosts, choice_costs
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import load_runtime


def _brute(time, tail, base, per, cap, L, S, B):
    """The least 1F1B objective over every cut of L layers into S stages that fits."""
    best = np.inf
    for cuts in itertools.combinations(range(1, L), S - 1):
        edges = (0, *cuts, L)
        times, tails, ok = [], [], True
        for i, pos in enumerate(positions_of(S)):
            n = edges[i + 1] - edges[i]
            r = min(S - i, B)
            ok &= bool(base[n, pos] + r * per[n, pos] <= cap)
            times.append(time[n, pos])
            tails.append(tail[n, pos])
        if ok and all(np.isfinite(times)):  # the largest tail of any stage, as the DP and the estimate
            best = min(best, sum(times) + (B - 1) * max(times) + max(tails))
    return best


def _random_tables(rng, L):
    n = np.arange(L + 1, dtype=float)[:, None]
    time = n * rng.uniform(0.5, 2.0) + rng.uniform(0.0, 1.0, size=(L + 1, 4))
    tail = rng.uniform(0.0, 1.0, size=(L + 1, 4))
    base = n * rng.uniform(1.0, 3.0) + rng.uniform(0.0, 2.0, size=(L + 1, 4))
    per = n * rng.uniform(0.0, 1.0) + rng.uniform(0.0, 1.0, size=(L + 1, 4))
    for a in (time, tail, base, per):
        a[0] = np.inf
    time[rng.random(time.shape) < 0.1] = np.inf
    return time, tail, base, per


@pytest.mark.parametrize("seed", range(60))
def test_pipeline_floor_is_at_most_the_best_cut(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(1, 9))
    S, B = int(rng.integers(1, L + 1)), int(rng.integers(1, 10))
    time, tail, base, per = _random_tables(rng, L)
    cap = float(rng.choice([np.inf, np.quantile(base[1:] + per[1:], 0.6)]))
    floor = float(pipeline_floor_s(time, tail, base, per, cap, L, S, B))
    exact = _brute(time, tail, base, per, cap, L, S, B)
    assert floor <= exact * (1 + 1e-12) or (np.isinf(floor) and np.isinf(exact))
    if S <= 2:  # first stage and the rest: exact
        assert floor == pytest.approx(exact, rel=1e-12) or (np.isinf(floor) and np.isinf(exact))


def _brute_slowest(time, base, per, cap, L, S, B):
    """The least slowest-stage time over every cut of L layers into S stages that fits (1F1B depths)."""
    best = np.inf
    for cuts in itertools.combinations(range(1, L), S - 1):
        edges = (0, *cuts, L)
        times = [time[edges[i + 1] - edges[i], pos] for i, pos in enumerate(positions_of(S))]
        fits = all(base[edges[i + 1] - edges[i], pos] + min(S - i, B) * per[edges[i + 1] - edges[i], pos] <= cap
                   for i, pos in enumerate(positions_of(S)))
        if fits and all(np.isfinite(times)):
            best = min(best, max(times))
    return best


@pytest.mark.parametrize("seed", range(80))
def test_least_slowest_stage_is_at_most_the_best_cuts(seed):
    """No cut that fits has a slowest stage faster than least_slowest_s (memory binding or not), and
    where no cut fits because deep stages hold too few layers it says so (inf)."""
    rng = np.random.default_rng(500 + seed)
    L = int(rng.integers(3, 10))
    S, B = int(rng.integers(3, L + 1)), int(rng.integers(1, 12))
    time, _, base, per = _random_tables(rng, L)
    cap = float(rng.choice([np.inf, np.quantile(base[1:] + 2 * per[1:], rng.uniform(0.2, 0.9))]))
    floor = float(least_slowest_s(time, base, per, cap, L, S, B))
    exact = _brute_slowest(time, base, per, cap, L, S, B)
    assert floor <= exact or (np.isinf(floor) and np.isinf(exact))
    whole = float(pipeline_floor_s(time, np.zeros_like(time), base, per, cap, L, S, B))
    assert whole <= _brute(time, np.zeros_like(time), base, per, cap, L, S, B) * (1 + 1e-12) or np.isinf(whole)


def test_least_slowest_stage_sees_deep_stages_holding_fewer_layers():
    """Stages deep in flight fit one layer only, so the shallow ones take the rest: the floor is the
    brute-force slowest stage, where the layers' balance alone (no memory) is lower."""
    L, S, B = 10, 4, 8
    n = np.arange(L + 1, dtype=float)[:, None]
    time = np.repeat(n, 4, axis=1)  # a second a layer, at any position
    base, per = np.zeros_like(time), np.repeat(n, 4, axis=1)  # a byte of activations a layer and micro-batch
    cap = 6.0  # a stage holding d micro-batches fits 6 // d layers: 1 (the first), 2, 3, 6 (the last)
    floor = float(least_slowest_s(time, base, per, cap, L, S, B))
    assert floor == _brute_slowest(time, base, per, cap, L, S, B) == 4.0  # 1 + 2 + 3 + 4 layers
    assert float(least_slowest_s(time, base, per, np.inf, L, S, B)) == 3.0  # 3 + 3 + 3 + 1


@pytest.mark.parametrize("seed", range(20))
def test_interleaved_floor_is_the_equal_layout_score(seed):
    rng = np.random.default_rng(100 + seed)
    L, S = 12, int(rng.choice([2, 3, 4, 6]))
    B, v = int(rng.integers(S, 3 * S)), int(rng.choice([2, 3]))
    time, tail, base, per = _random_tables(rng, L)
    n = L // S
    times = [time[n, pos] for pos in positions_of(S)]
    want = sum(times) / v + (B - 1 / v) * max(times)
    got = float(interleaved_floor_s(time, base, per, np.inf, L, S, B, v, min(B, S)))
    assert got == pytest.approx(want, rel=1e-12)


def _problem(model: str, gpus: int, runtime: str = "megatron", cluster: str = "dgx-h100", batch: int = 64):
    spec = load_preset(model)
    run = load_runtime(runtime)
    return SearchProblem(model=spec, workload=training_workload(spec, global_batch=batch), runtime=run,
                         cluster=resolve_cluster(cluster), gpus=gpus, space=load_space(run.space))


def test_count_floors_equal_the_floors_of_each_counts_tables():
    search = SliceSearch(_problem("small", 4))
    screens = search.uniform.screens
    full = next(c for rep, cls in screens.classes(1, 4).items() for _, c in cls.members if c.recompute == "full")
    ctx = search._slice_context(1)
    full_costs, none_costs = choice_costs(ctx, full), choice_costs(ctx, replace(full, recompute="none"))
    counts = np.arange(1, search.problem.model.num_layers)
    shape = (search.problem.model.num_layers, 4, 16, 1, 4)
    plains, _ = count_floors(none_costs, full_costs, counts, 0, search.capacity, shape)
    tables = [count_costs(none_costs, full_costs, int(k)) for k in counts]
    each, _ = member_floors(tables, 0, search.capacity, shape)
    L, S, B = shape[:3]
    scored = counts < L // S  # every stage holds more layers than the count: S (count + 1) <= L
    np.testing.assert_allclose(plains[scored], each[scored], rtol=1e-12)
    assert np.isinf(plains[~scored]).all() and (~scored).any()
    for t in (t for t, ok in zip(tables, scored) if not ok):  # no cut of those counts' tables exists
        assert _brute(t.time_s[0], t.tail_s[0], t.mem_base_bytes[0], t.mem_per_microbatch_bytes[0], search.capacity,
                      L, S, B) == np.inf


def _sampled_classes(screens):
    """(model-parallel size, its data-parallel degrees, class) for four classes at sizes 2 and 8."""
    for mp in (2, 8):
        dps = [dp for dp in screens.dps() if any(m == mp for m, _ in screens.submeshes(dp))]
        for rep in list(screens.classes(dps[-1], mp))[:4]:
            yield mp, dps, rep


CASES = [("llama3-8b", 64, "megatron"), ("olmoe-1b-7b", 32, "megatron"), ("llama3-8b", 32, "torchtitan")]


@pytest.mark.parametrize("model, gpus, runtime", CASES)
def test_representatives_and_the_smallest_degree_floor_every_member_at_every_degree(model, gpus, runtime):
    """The time screen's facts: a class member's micro-batch time at any degree is at least its
    representative's at the smallest degree with the class (where both price a micro-batch size
    and a position)."""
    search = SliceSearch(_problem(model, gpus, runtime))
    screens = search.uniform.screens
    checked = 0
    for mp, dps, rep in _sampled_classes(screens):
        found = screens.time_screen(mp, rep)
        for dp in (dps[0], dps[-1]):
            if rep not in screens.classes(dp, mp):
                continue
            ctx = search._slice_context(dp)
            positions = sorted(set(positions_of(dict(screens.submeshes(dp))[mp])))
            for _, choice in screens.classes(dp, mp)[rep].members[:6]:
                costs = choice_costs(ctx, choice, positions)
                if found is None:  # no degree's stage can take the class (expert degrees dividing none)
                    assert not np.isfinite(costs.time_s).any()
                    continue
                floor_sizes = search.micro_batches(found[0])
                for b in set(ctx.micro_batches) & set(floor_sizes):
                    got = costs.time_s[ctx.micro_batches.index(b)][1:, positions]
                    low = found[1].time_s[floor_sizes.index(b)][1:, positions]
                    ok = np.isfinite(got)
                    assert np.all(np.isfinite(low[ok]))  # a stage that can take the choice has a floor
                    assert np.all(got[ok] >= low[ok] * (1 - 1e-12))
                    checked += int(ok.sum())
    assert checked > 100


@pytest.mark.parametrize("model, gpus, runtime", CASES)
def test_the_leanest_members_at_the_largest_degree_floor_every_members_memory(model, gpus, runtime):
    search = SliceSearch(_problem(model, gpus, runtime))
    screens = search.uniform.screens
    checked = 0
    for mp, dps, rep in _sampled_classes(screens):
        if screens.time_screen(mp, rep) is None:  # no degree's stage can take it: no screens (and no members)
            continue
        sizes, base, per = screens.memory_screen(mp, rep)
        for dp in dps:
            if rep not in screens.classes(dp, mp):
                continue
            ctx = search._slice_context(dp)
            stages = dict(screens.submeshes(dp))[mp]
            positions = sorted(set(positions_of(stages)))  # where this degree's stages sit
            for _, choice in screens.classes(dp, mp)[rep].members[:6]:
                costs = choice_costs(ctx, choice, positions)
                for b in ctx.micro_batches:
                    i, m = ctx.micro_batches.index(b), sizes.index(b)
                    for r in (1.0, 4.0):
                        got = (costs.mem_base_bytes[i] + r * costs.mem_per_microbatch_bytes[i])[:, positions]
                        low = (base[m] + r * per[m])[:, positions]
                        ok = np.isfinite(got)
                        assert np.all(got[ok] >= low[ok] * (1 - 1e-12))
                        checked += int(ok.sum())
    assert checked > 100


@pytest.mark.parametrize("model, gpus, runtime, lean_selective", [(*CASES[0], True), (*CASES[1], False)])
def test_refined_floors_equal_every_kind_priced_with_its_own_times(model, gpus, runtime, lean_selective):
    """refined_floor prices a kind's time screen (other than none and full) only where the kind's
    floor from the representative's times may set the least: the floors are those of every kind
    with its own times and memory, and the counts between none and full. ``lean_selective``: the
    selective members' memory screens read as empty and their times 2% above the representative's
    (no faster, as members are), so that selective recomputation sets the least floor where memory
    binds the others and its own times matter (real tables rarely have it)."""
    search = SliceSearch(_problem(model, gpus, runtime))
    uniform, screens, cap = search.uniform, search.uniform.screens, search.capacity
    if lean_selective:
        memory_screen, time_screen = screens.memory_screen, screens.time_screen

        def lean(mp, rep, recompute=None):
            sizes, base, per = memory_screen(mp, rep, recompute)
            empty = lambda a: np.where(np.isfinite(a), 0.0, a)  # noqa: E731
            return (sizes, empty(base), empty(per)) if recompute == "selective" else (sizes, base, per)

        def slower(mp, rep, recompute="none"):
            dp, costs = time_screen(mp, rep, recompute)
            return (dp, replace(costs, time_s=1.02 * costs.time_s)) if recompute == "selective" else (dp, costs)

        screens.memory_screen, screens.time_screen = lean, slower
    checked, set_by_selective = 0, 0
    for key in search.keys[::1 if lean_selective else 3]:
        for mp, stages in screens.submeshes(key.dp):
            shape = uniform._shape(key, stages, uniform._chunks(key, stages))
            for rep, cls in list(screens.classes(key.dp, mp).items())[:3]:
                got = screens.refined_floor(key, mp, rep, shape)
                kinds = sorted({c.recompute for _, c in cls.members})
                tables = {r: screens._screen_at(key, mp, rep, r, r) for r in kinds}
                if any(t is None for t in tables.values()):
                    assert got == (0.0, 0.0)
                    continue
                plain, inter = member_floors(list(tables.values()), 0, cap, shape)
                want = [float(plain.min()), float(inter.min())]
                counts = np.array(screens.counts.get((key.dp, mp), []))
                if counts.size and "full" in tables:
                    none = tables.get("none") or screens._screen_at(key, mp, rep, "none", "full")
                    plains, inters = count_floors(none, tables["full"], counts, 0, cap, shape)
                    want = [min(want[0], float(plains.min())), min(want[1], float(inters.min()))]
                assert got == tuple(want)
                checked += len(kinds) > 2
                set_by_selective += "selective" in kinds and want[0] == float(plain[kinds.index("selective")]) < min(
                    float(plain[kinds.index(r)]) for r in ("none", "full") if r in kinds)
    assert checked > 10 and (set_by_selective > 0 if lean_selective else True)


def test_classes_fold_only_what_trades_time_for_memory():
    search = SliceSearch(_problem("llama3-8b", 64))
    for cls in search.uniform.screens.classes(4, 8).values():
        assert representative(cls.rep) == cls.rep and cls.rep.recompute == "none" and cls.rep.zero in (0, 3)
        assert {(c.tp, c.cp, c.fp8, c.ep, c.etp, c.mesh_order) for _, c in cls.members} == {
            (cls.rep.tp, cls.rep.cp, cls.rep.fp8, cls.rep.ep, cls.rep.etp, cls.rep.mesh_order)}
        assert all(c.recompute == "full" for c in _leanest(cls))
    assert price_positions(1) == [SINGLE] and price_positions(5) == [FIRST, LAST, MIDDLE]
    assert isinstance(search.uniform.screens.price(4, 8, cls.rep, [MIDDLE], "member"), ChoiceCosts)


@pytest.mark.parametrize("model, gpus", [("llama3-8b", 64), ("olmoe-1b-7b", 32)])
def test_sends_by_the_faster_link_price_the_lesser_of_both_links(model, gpus):
    """A time screen whose degrees' stages send both inside a node and across nodes is priced once,
    sends by the faster link: element by element the lesser of the two links' tables."""
    search = SliceSearch(_problem(model, gpus))
    screens = search.uniform.screens
    both = [(mp, rep) for mp in (1, 2, 4) for dp in screens.dps() for rep in (screens.classes(dp, mp) if any(
        m == mp for m, _ in screens.submeshes(dp)) else ()) if screens._links(mp, rep, screens._degrees(mp, rep)[0]) == [
        EITHER_LINK]]
    checked = 0
    for mp, rep in list(dict.fromkeys(both))[:3]:
        dps, positions = screens._degrees(mp, rep)
        ctx = search._slice_context(dps[0])
        for choice in (rep, replace(rep, recompute="full")):
            either, intra, inter = (choice_costs(ctx, choice, positions, link) for link in (EITHER_LINK, False, True))
            np.testing.assert_array_equal(either.time_s, np.fmin(intra.time_s, inter.time_s))
            assert np.any(intra.time_s != inter.time_s)
            for name in ("tail_s", "mem_base_bytes", "mem_per_microbatch_bytes"):
                np.testing.assert_array_equal(getattr(either, name), getattr(intra, name))
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("gpus, batch, cluster", [(4, 32, "dgx-a100-40gb"), (8, 64, "dgx-h100")])
def test_the_pruned_search_finds_the_unpruned_plan_of_a_small_moe(gpus, batch, cluster):
    """Floors, shared screens, memory screens priced alone and kept tables change what is priced,
    never the answer: the default method's plan is the exhaustive enumeration's (every member of
    every class priced at every degree), for an MoE whose memory binds (4 GPUs of 40 GB: the fewest
    that hold it) and one with room."""
    from autotune.search.api import search

    kwargs = dict(cluster=cluster, global_batch=batch, seq_len=4096, cache=False, plots="none")
    pruned = search("olmoe-1b-7b", gpus, **kwargs)
    unpruned = search("olmoe-1b-7b", gpus, method="exhaustive", **kwargs)
    assert pruned.plan == unpruned.plan
    assert pruned.estimate.step_time_s == unpruned.estimate.step_time_s
    assert pruned.stats.num_trials < unpruned.stats.num_trials


BARE_CASES = [("llama3-8b", 16, "megatron", "dgx-h100", False), ("olmoe-1b-7b", 8, "megatron", "dgx-h100", False),
              ("llama3-8b", 16, "torchtitan", "dgx-h100", False), ("gpt3-2.7b", 16, "deepspeed", "dgx-a100-40gb", True),
              ("olmoe-1b-7b", 8, "nemo", "dgx-a100-80gb", True)]


@pytest.mark.parametrize("model, gpus, runtime, cluster, offload", BARE_CASES)
def test_a_bare_stage_floors_every_member_of_its_class_at_every_degree_and_position(model, gpus, runtime, cluster,
                                                                                  offload):
    """members.bare_times, a class's first floor (no embedding, no head, no pipeline neighbour, at
    the smallest degree with the class), is at most every member's micro-batch time, priced by the
    cost model at every degree whose studies have the class and every position its pipelines
    take, for every micro-batch size both price: dense and MoE stages, FP8, every recomputation,
    ZeRO 0-3 with FSDP's resharding variants, and (``offload``: the space's fallback, what the
    search widens to when nothing fits) offloading."""
    problem = _problem(model, gpus, runtime, cluster)
    if offload:
        problem = replace(problem, space=replace(problem.space, offload=problem.space.offload_fallback))
    search = SliceSearch(problem)
    screens = search.uniform.screens
    checked, members = 0, 0
    for dp in screens.dps():
        ctx = search._slice_context(dp)
        for mp, stages in screens.submeshes(dp):
            positions = sorted(set(positions_of(stages)))
            for rep, cls in screens.classes(dp, mp).items():
                found = screens.bare_screen(mp, rep)
                for _, choice in cls.members:
                    costs = choice_costs(ctx, choice, positions)
                    members += 1
                    if found is None:  # no degree's stage can take the class (expert degrees dividing none)
                        assert not np.isfinite(costs.time_s).any()
                        continue
                    dp_min, bare = found
                    floor_sizes = search.micro_batches(dp_min)
                    for b in set(ctx.micro_batches) & set(floor_sizes):
                        got = costs.time_s[ctx.micro_batches.index(b)][1:, positions]
                        low = bare.time_s[floor_sizes.index(b)][1:, positions]
                        priced = np.isfinite(got)
                        assert np.all(np.isfinite(low[priced]))  # a choice the stage can take has a floor
                        assert np.all(got[priced] >= low[priced] * (1 - 1e-12))
                        checked += int(priced.sum())
    assert members >= 16 and checked > 1000
