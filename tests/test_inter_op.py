"""The stage DP against brute force on random cost tensors."""

import itertools

import numpy as np
import pytest

from autotune.search.inter_op import FIRST, LAST, MIDDLE, SINGLE, solve_pipeline


def position(k, n, L):
    end = k + n
    if k == 0:
        return SINGLE if end == L else FIRST
    return LAST if end == L else MIDDLE


def brute_force(time_s, tail_s, units, total_units, b, max_stages, kind="pipeline", inflight_all=False):
    L = time_s.shape[1] - 1
    best = np.inf
    for s in range(1, min(L, max_stages) + 1):
        for cuts in itertools.combinations(range(1, L), s - 1):
            bounds = (0, *cuts, L)
            sizes = [bounds[i + 1] - bounds[i] for i in range(s)]
            for meshes in itertools.product(range(len(units)), repeat=s):
                if sum(units[m] for m in meshes) != total_units:
                    continue
                times, tails = [], []
                for i, (m, n) in enumerate(zip(meshes, sizes)):
                    r = min(b, time_s.shape[3] - 1) if inflight_all else min(s - i, b)
                    p = position(bounds[i], n, L)
                    times.append(time_s[m, n, p, r])
                    tail = tail_s[m, n, p, r]
                    tails.append(tail if np.isfinite(tail) else 0.0)  # as the estimate: a stage's tail, inf/NaN none
                if all(np.isfinite(times)):  # the largest tail of any stage (assemble_estimate's)
                    total = sum(times)
                    value = max(total, b * max(times)) if kind == "rounds" else total + (b - 1) * max(times)
                    best = min(best, value + max(tails))
    return best


def random_case(rng, M, L, R, inf_share):
    shape = (M, L + 1, 4, R + 1)
    per_layer = rng.uniform(0.5, 2.0, size=(M, 1, 1, 1))
    n = np.arange(L + 1)[None, :, None, None]
    time = n * per_layer + rng.uniform(0.0, 1.5, size=shape)
    time = time + rng.uniform(0, 0.3, size=shape) * np.arange(R + 1)[None, None, None, :]
    time[rng.random(shape) < inf_share] = np.inf
    time[:, 0] = np.inf
    # tails grow with the layers (gradient sync and optimizer), the first and last stages' larger
    # (embedding, head) and a few unknown, so that any stage's may be the largest
    tail = 0.3 * n * rng.uniform(0.2, 1.0, size=(M, 1, 1, 1)) + rng.uniform(0.0, 2.0, size=shape)
    tail[:, :, [FIRST, LAST]] += rng.uniform(0.0, 3.0, size=(M, 1, 2, 1))
    tail[rng.random(shape) < 0.05] = np.nan
    return time, tail


@pytest.mark.parametrize("kind, inflight_all", [("pipeline", False), ("pipeline", True), ("rounds", True)])
@pytest.mark.parametrize("seed", range(30))
def test_dp_matches_brute_force(seed, kind, inflight_all):
    rng = np.random.default_rng(seed)
    M = int(rng.integers(1, 3))
    L = int(rng.integers(1, 7))
    units = np.array(sorted(rng.choice([1, 2, 4], size=M, replace=False)))
    total_units = int(rng.choice([1, 2, 4, 6])) * int(units.min())
    b = int(rng.integers(1, 6))
    max_stages = int(rng.integers(1, 7))
    R = b if inflight_all else max(1, min(b, max_stages, L))
    time, tail = random_case(rng, M, L, R, inf_share=float(rng.choice([0.0, 0.2])))
    if kind == "rounds" and seed % 2:
        tail[:] = 0.0  # decode rounds have no step tail (the objective is defined with one too)
    expected = brute_force(time, tail, units, total_units, b, max_stages, kind, inflight_all)
    solution = solve_pipeline(time, tail, units, total_units, b, max_stages, objective=kind, inflight_all=inflight_all)
    if not np.isfinite(expected):
        assert solution is None
        return
    assert solution is not None
    assert solution.objective_s == pytest.approx(expected, rel=1e-12)
    cuts = solution.stages
    assert cuts[0].first_layer == 0 and sum(c.num_layers for c in cuts) == L
    assert all(a.first_layer + a.num_layers == b.first_layer for a, b in zip(cuts, cuts[1:]))
    assert sum(units[c.submesh] for c in cuts) == total_units or len(units) == 1


@pytest.mark.parametrize("seed", range(30))
def test_a_bar_drops_exactly_the_members_that_score_above_it(seed):
    """``at_most`` (a caller's best so far): the same least plan where it scores at most the bar
    (a bar equal to it included), None where every plan scores above it, against brute force."""
    rng = np.random.default_rng(500 + seed)
    M, L = int(rng.integers(1, 3)), int(rng.integers(2, 7))
    units = np.array(sorted(rng.choice([1, 2, 4], size=M, replace=False)))
    total_units, b = int(rng.choice([2, 4])) * int(units.min()), int(rng.integers(1, 6))
    time, tail = random_case(rng, M, L, max(1, min(b, 4, L)), inf_share=0.1)
    expected = brute_force(time, tail, units, total_units, b, 4)
    if not np.isfinite(expected):
        assert solve_pipeline(time, tail, units, total_units, b, 4, at_most=1e9) is None
        return
    free = solve_pipeline(time, tail, units, total_units, b, 4)
    assert free.objective_s == pytest.approx(expected, rel=1e-12)
    least = free.objective_s
    for bar in (least, least * (1 + 1e-9), least + rng.uniform(0, 2), least * (1 - 1e-9), least - rng.uniform(0, 2)):
        found = solve_pipeline(time, tail, units, total_units, b, 4, at_most=bar)
        if least > bar:
            assert found is None
        else:  # the same plan as without a bar
            assert found is not None and found.objective_s == least and found.stages == free.stages


def test_uneven_first_stage_when_the_embedding_is_heavy():
    L, R = 4, 2
    time = np.full((1, L + 1, 4, R + 1), np.inf)
    for n in range(1, L + 1):
        time[0, n] = n * 1.0
        time[0, n, 1] = n * 1.0 + 2.0  # the first stage also runs the embedding
    tail = np.zeros_like(time)
    solution = solve_pipeline(time, tail, np.array([1]), 2, 8, 4)
    assert [c.num_layers for c in solution.stages] == [1, 3]


@pytest.mark.parametrize("seed", range(8))
def test_branch_and_bound_matches_every_pair_of_caps_on_deep_pipelines(seed):
    """Beyond brute force's reach (16-28 layers): the branch and bound over the two caps (which
    skips slowest-stage caps below the least slowest stage, and the pairs a solved plan settles)
    finds the objective of trying every pair of a candidate stage time and a candidate stage
    tail with the capped least-sum DP. Times and tails are rounded to halves, so that every pair
    can be tried (and ties abound)."""
    from autotune.search.inter_op import _combine, _min_sum, _min_sum_uniform
    from autotune.search.stage_tables import StageTables as _Tables

    rng = np.random.default_rng(100 + seed)
    L, b = int(rng.integers(16, 29)), int(rng.integers(2, 12))
    uniform = seed % 2 == 0
    units = np.array([2]) if uniform else np.array([1, 2])
    total_units = 2 * int(rng.integers(2, 5))
    max_stages = total_units
    R = min(b, max_stages)
    time, tail = random_case(rng, len(units), L, R, inf_share=0.05)
    time, tail = np.round(time * 2) / 2, np.round(tail * 2) / 2
    solution = solve_pipeline(time, tail, units, total_units, b, max_stages)
    tables = _Tables(time, tail)
    if uniform:
        solve = lambda cap, d: _min_sum_uniform(tables, total_units // 2, b, cap, True, tail_max=d)  # noqa: E731
        trace_units, trace_total = np.array([0]), 0
    else:
        solve = lambda cap, d: _min_sum(tables, units, total_units, b, max_stages, cap, True, tail_max=d)  # noqa: E731
        trace_units, trace_total = units, total_units
    from autotune.search.inter_op import _objective, _trace

    best, values = np.inf, tables.stage_time_values()
    for d in np.unique(tables.stage_tail_values()):
        for cap in np.unique(values[np.isfinite(values)]):
            total, best_j, path = solve(cap, d)
            if np.isfinite(total):
                cuts = _trace(path, best_j, trace_units, trace_total)
                best = min(best, _objective(time, tail, cuts, L, b))
                assert _objective(time, tail, cuts, L, b) >= _combine("pipeline", total, 0.0, b)
    if not np.isfinite(best):
        assert solution is None
    else:
        assert solution.objective_s == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_uniform_dp_equals_the_general_dp_on_one_submesh_size(seed):
    """The uniform DP (a middle stage's time broadcast over starts, no [k, n] table) finds the
    general DP's least sum and least slowest stage under every cap, with S stages of one unit."""
    from autotune.search.inter_op import _min_sum, _min_sum_uniform
    from autotune.search.stage_tables import StageTables as _Tables

    rng = np.random.default_rng(300 + seed)
    L, b = int(rng.integers(2, 31)), int(rng.integers(1, 9))
    stages = int(rng.integers(1, min(L, 6) + 1))
    time, tail = random_case(rng, 1, L, min(b, stages), inf_share=float(rng.choice([0.0, 0.1])))
    tables = _Tables(time, tail)
    values = tables.stage_time_values()
    distinct = np.unique(tables.stage_tail_values())
    tails = [np.inf, *distinct[[len(distinct) // 4, len(distinct) // 2, 3 * len(distinct) // 4]]]
    for cap, d in itertools.product([np.inf, *np.unique(values[np.isfinite(values)])[::3]], tails):
        for bottleneck in (False, True):
            uniform = _min_sum_uniform(tables, stages, b, cap, bottleneck=bottleneck, tail_max=d)[0]
            general = _min_sum(tables, np.array([1]), stages, b, stages, cap, bottleneck=bottleneck, tail_max=d)
            # one unit a stage: using all S units is exactly S stages
            assert uniform == general[0] or uniform == pytest.approx(general[0], rel=1e-12)
            # the solve that keeps its path reads the same least off each row as the one that does not
            traced = _min_sum_uniform(tables, stages, b, cap, keep_path=True, bottleneck=bottleneck, tail_max=d)[0]
            assert np.asarray(traced).tobytes() == np.asarray(uniform).tobytes()

