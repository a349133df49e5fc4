"""Seed 000's GPU + CXL LoRA problem: Optuna under constraints against exhaustive enumeration."""

import itertools
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import AutotuneError
from autotune.scenarios.cxl_lora import (constraint_values, format_solution, parse_overrides, problem_from_space,
                                      solve_cxl_lora, solve_exhaustive, solve_space, stage_times, throughput)

SPACE = tomllib.loads((Path(__file__).resolve().parents[1] / "search_spaces" / "cxl-lora.toml").read_text())
# A variant where the CXL side matters (faster link and CXL compute, lower latency), on a small
# grid: the optimum moves a real share of the batch to CXL, so agreement is not a given.
BUSY_CXL = {"bandwidth_bytes_per_s": "2e13", "cxl_flops": "3e12", "latency_s": "1e-7", "b_max": "2048",
            "step": "16", "n_trials": "120"}


def test_optuna_matches_exhaustive_enumeration():
    p = problem_from_space(SPACE, BUSY_CXL)
    exact = solve_exhaustive(p)
    found = solve_cxl_lora(p)
    assert exact.b3 > 0.1 * exact.b1  # the CXL side carries a real share
    assert all(v <= 1e-12 for v in found.constraints.values())
    assert found.throughput <= exact.throughput * (1 + 1e-12)
    assert found.throughput >= 0.995 * exact.throughput


def test_exhaustive_reduction_over_b3_equals_brute_force():
    # The enumeration takes the largest feasible b3 for each (b1, b2); brute force over all three.
    p = problem_from_space(SPACE, {**BUSY_CXL, "latency_s": "1e-8", "b_max": "320", "step": "16"})
    best = max((float(throughput(p, *pt)), pt) for pt in itertools.product(p.grid, repeat=3)
               if all(v <= 1e-12 for v in constraint_values(p, *pt).values()))
    exact = solve_exhaustive(p)
    assert exact.throughput == pytest.approx(best[0])
    assert (exact.b1, exact.b2, exact.b3) == tuple(int(x) for x in best[1])


def test_seed_numbers_leave_almost_everything_to_the_gpu():
    # Per row the CXL path costs 4d/BW + 2dr/F_cxl = 122 ns, the GPU 2dr/F_gpu = 0.26 ns; the
    # 1 us latency needs b1 >= 1e-6 * 15.7e12 / 4096 = 3833 before any row can go to CXL.
    p = problem_from_space(SPACE, {"b_max": "16384", "step": "64"})
    exact = solve_exhaustive(p)
    assert exact.b1 >= 3833 and (exact.b2 + exact.b3) <= 0.003 * exact.b1
    assert any(b.startswith("s1_cxl_time") for b in exact.binding)
    assert exact.throughput == pytest.approx((exact.b1 + exact.b2 + exact.b3) * 15.7e12 / (2 * 512 * 4 * (2 * exact.b1 + exact.b2)))


def test_negative_stage2_time_is_reported_clamped():
    p = problem_from_space(SPACE)
    raw = stage_times(p, 4096.0, 64.0, 0.0)["T_CXL_S2"]
    assert raw < 0  # the seed's formula as written: -4 b2 r / BW
    from autotune.scenarios.cxl_lora import _solution
    sol = _solution(p, "check", 4096, 64, 0, 1)
    assert sol.times_s["T_CXL_S2"] == 0.0 and sol.times_s["T_CXL_S2_as_written"] == pytest.approx(raw)


def test_no_gpu_work_is_infeasible_not_a_division_by_zero():
    p = problem_from_space(SPACE, {"latency_s": "0"})
    values = constraint_values(p, 0.0, 0.0, 64.0)
    assert values["gpu_time_positive"] > 0 and float(throughput(p, 0.0, 0.0, 64.0)) == 0.0


def test_fixed_total_batch_is_split():
    p = problem_from_space(SPACE, {**BUSY_CXL, "total_batch": "1024", "b_max": "1024"})
    exact = solve_exhaustive(p)
    assert exact.b1 + exact.b2 + exact.b3 == 1024
    assert "b1 + b2 + b3 = total_batch" in exact.binding


def test_overrides_and_bad_input():
    assert parse_overrides(["d=1024", " r = 8 "]) == {"d": "1024", "r": "8"}
    assert problem_from_space(SPACE, {"d": "1024"}).d == 1024
    for bad, field in ((["d"], "--set"), (["nope=1"], "--set"), (["d=abc"], "--set"), (["step=0"], "step"),
                       (["gpu_flops=-1"], "gpu_flops"), (["total_batch=100"], "total_batch")):
        with pytest.raises(AutotuneError) as err:
            problem_from_space(SPACE, parse_overrides(bad))
        assert err.value.field == field, bad
    with pytest.raises(AutotuneError) as err:  # b1 can never hide the latency
        solve_exhaustive(problem_from_space(SPACE, {"b_max": "1024", "step": "64"}))
    assert "raise b_max" in err.value.message
    with pytest.raises(AutotuneError) as err:
        solve_exhaustive(problem_from_space(SPACE, {"b_max": "1000000", "step": "1"}))
    assert err.value.field == "step"


def test_space_loads_and_formats():
    from autotune.search.space import load_space

    space = load_space("cxl-lora")
    assert space.kind == "cxl-lora"
    text = solve_space(space.raw_dict, BUSY_CXL)
    assert "b1 = " in text and "binding:" in text and "exhaustive" in text
    p = problem_from_space(SPACE, BUSY_CXL)
    data = json.loads(format_solution(p, [solve_exhaustive(p)], as_json=True))
    assert {"b1", "b2", "b3", "throughput", "binding"} <= set(data["solutions"][0])
    assert np.isfinite(data["solutions"][0]["throughput"])
