"""The GPU + CXL LoRA throughput problem of seed 000: Optuna with constraints, and exhaustively.

A LoRA layer (``d x r`` adapters) runs batch ``b1`` on the GPU and batches ``b2``, ``b3`` through
CXL-attached memory with its own compute. Per stage (the seed's formulas, times in seconds):

    T_GPU_S1 = 2 b1 d r / F_gpu
    T_CXL_S1 = L + 4 (b2 + b3) d / BW + 2 (b2 + b3) d r / F_cxl + 4 b2 r / BW
    T_GPU_S2 = 2 (b1 + b2) r d / F_gpu
    T_CXL_S2 = 2 b3 r d / F_cxl + 4 b3 d / BW - 4 b2 r / BW
    maximise (b1 + b2 + b3) / (T_GPU_S1 + T_GPU_S2)
    s.t. T_CXL_S1 <= T_GPU_S1, T_CXL_S2 <= T_GPU_S2 and four GPU-memory limits.

What the text leaves open, and the choices made (docs/inference.md has the analysis):

* b1, b2, b3 are batch sizes, not binaries: integers in ``[0, b_max]``, multiples of ``step``.
* T_CXL_S2 goes negative when b2 r > b3 (d + ...) (b3 = 0, b2 > 0): it is reported clamped at 0.
  Feasibility does not change: ``max(0, x) <= T_GPU_S2`` iff ``x <= T_GPU_S2``, as T_GPU_S2 >= 0.
* b1 = b2 = 0 makes the denominator 0. The latency makes it infeasible anyway (T_CXL_S1 >= L >
  0 = T_GPU_S1); a constraint ``b1 + b2 >= 1`` states it, so no trial divides by zero.
* The problem is bounded: the memory limit caps b1 + b2 + b3 at M / (4 d). The throughput is a
  ratio of linear functions (a linear-fractional program, which Charnes-Cooper turns into an LP,
  so the seed's "not linear" note holds for the integer version only); it grows with scale only
  through the fixed latency, so the optimum sits at the largest batches allowed: ``b_max``.
* With ``total_batch`` > 0 the batch is fixed and the question is its split (b3 = total - b1 - b2).

b3 appears only in the numerator and as an upper bound in the constraints, so for given b1, b2
its best value is the largest feasible one on the grid. Both solvers use this exact reduction:
the enumeration walks every (b1, b2) of the grid; Optuna samples b1, and b2 as a share of the
largest b2 that b1 allows (a reparametrisation: every grid b2 stays reachable), with all the
constraints set on each trial.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

import numpy as np

from autotune.errors import AutotuneError, require

__all__ = ["CxlLoraProblem", "CxlLoraSolution", "problem_from_space", "parse_overrides", "stage_times",
           "constraint_values", "solve_cxl_lora", "solve_exhaustive", "format_solution", "CONSTRAINTS",
           "MAX_EXHAUSTIVE_PAIRS", "solve_space", "throughput", "best_b3"]

# name -> what it says (value <= 0 is feasible; values are relative: divided by their limit)
CONSTRAINTS = {
    "s1_cxl_time": "T_CXL_S1 <= T_GPU_S1",
    "s1_s2_gpu_memory_all": "4 (b1 + b2 + b3) d <= GPU memory (stated for both stages)",
    "s1_gpu_memory_lora": "4 b1 d + 4 d r + 4 b1 r <= GPU memory",
    "s1_gpu_memory_rank": "4 (b1 + b2) r <= GPU memory",
    "s2_cxl_time": "T_CXL_S2 <= T_GPU_S2",
    "s2_gpu_memory_lora": "4 (b1 + b2) r + 4 r d + 4 (b1 + b2) d <= GPU memory",
    "gpu_time_positive": "b1 + b2 >= 1 (the throughput's denominator is not 0)",
}
MAX_EXHAUSTIVE_PAIRS = 50_000_000


@dataclass(frozen=True, kw_only=True)
class CxlLoraProblem:
    gpu_memory_bytes: float
    gpu_flops: float
    cxl_flops: float
    bandwidth_bytes_per_s: float
    latency_s: float
    d: int
    r: int
    b_max: int
    step: int = 1
    total_batch: int = 0
    n_trials: int = 300
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("gpu_memory_bytes", "gpu_flops", "cxl_flops", "bandwidth_bytes_per_s", "d", "r", "b_max",
                     "step", "n_trials"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and math.isfinite(value) and value > 0, name,
                    f"must be a finite number > 0, got {value!r}")
        require(isinstance(self.latency_s, (int, float)) and math.isfinite(self.latency_s) and self.latency_s >= 0,
                "latency_s", f"must be a finite number >= 0, got {self.latency_s!r}")
        from autotune.search.space import SPACE_LIMITS

        most, why = SPACE_LIMITS["n_trials"]
        require(self.n_trials <= most, "n_trials", f"must be at most {most:,} ({why}), got {self.n_trials:,}")
        for name in ("d", "r", "b_max", "step", "total_batch", "n_trials", "seed"):
            require(float(getattr(self, name)).is_integer(), name, f"must be an integer, got {getattr(self, name)!r}")
        require(self.total_batch >= 0 and self.total_batch % self.step == 0, "total_batch",
                f"must be 0 (free) or a positive multiple of step {self.step}, got {self.total_batch}")

    @property
    def grid(self) -> np.ndarray:
        return np.arange(0, self.b_max + 1, self.step, dtype=float)


_INT_FIELDS = {"d", "r", "b_max", "step", "total_batch", "n_trials", "seed"}


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``["d=1024", "latency_s=2e-6"]`` -> {"d": "1024", ...} (``--set NAME=VALUE``)."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        require(bool(sep) and bool(name.strip()), "--set", f"expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def problem_from_space(raw: Mapping[str, object], overrides: Mapping[str, str] | None = None) -> CxlLoraProblem:
    """The problem from a ``kind = "cxl-lora"`` space's tables, with ``--set`` overrides."""
    values: dict[str, object] = {}
    for table in ("parameters", "batches", "optuna"):
        section = raw.get(table, {})
        require(isinstance(section, dict), f"space.{table}", "must be a table")
        values.update(section)
    known = {f.name for f in fields(CxlLoraProblem)}
    for name, value in values.items():  # as the TOML has them: never coerced ("512" or 512.7 is no d)
        _check_number(f"space.{name}", value, integer=name in _INT_FIELDS)
    for name, text in (overrides or {}).items():
        require(name in known, "--set", f"unknown parameter {name!r}; known: {', '.join(sorted(known))}")
        try:
            values[name] = int(text) if name in _INT_FIELDS else float(text)
        except ValueError:
            what = "a whole number" if name in _INT_FIELDS else "a number"
            raise AutotuneError("--set", f"{name}={text!r} is not {what}") from None
        _check_number(f"--set {name}", values[name], integer=name in _INT_FIELDS)
    missing = sorted(known - set(values) - {"step", "total_batch", "n_trials", "seed"})
    require(not missing, "space", f"cxl-lora space lacks {', '.join(missing)}")
    unknown = sorted(set(values) - known)
    require(not unknown, "space", f"unknown cxl-lora keys {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return CxlLoraProblem(**{k: (v if k in _INT_FIELDS else float(v)) for k, v in values.items()})


def _check_number(field: str, value: object, *, integer: bool) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float)) and math.isfinite(value)
    require(ok and not isinstance(value, bool), field,
            f"must be {'a whole number' if integer else 'a finite number'}, got {value!r:.40}")


def stage_times(p: CxlLoraProblem, b1: object, b2: object, b3: object) -> dict[str, np.ndarray]:
    """The seed's four times (arrays broadcast); T_CXL_S2 as written, possibly negative."""
    d, r, bw = p.d, p.r, p.bandwidth_bytes_per_s
    return {
        "T_GPU_S1": 2.0 * b1 * d * r / p.gpu_flops,
        "T_CXL_S1": p.latency_s + 4.0 * (b2 + b3) * d / bw + 2.0 * (b2 + b3) * d * r / p.cxl_flops + 4.0 * b2 * r / bw,
        "T_GPU_S2": 2.0 * (b1 + b2) * r * d / p.gpu_flops,
        "T_CXL_S2": 2.0 * b3 * r * d / p.cxl_flops + 4.0 * b3 * d / bw - 4.0 * b2 * r / bw,
    }


def constraint_values(p: CxlLoraProblem, b1: object, b2: object, b3: object) -> dict[str, np.ndarray]:
    """Each constraint as (lhs - limit) / limit: feasible where <= 0."""
    t, mem, d, r = stage_times(p, b1, b2, b3), p.gpu_memory_bytes, p.d, p.r
    scale = max(p.latency_s, 2.0 * p.step * d * r / p.gpu_flops)  # a time unit: L or one grid step of GPU work
    return {
        "s1_cxl_time": (t["T_CXL_S1"] - t["T_GPU_S1"]) / scale,
        "s1_s2_gpu_memory_all": 4.0 * (b1 + b2 + b3) * d / mem - 1.0,
        "s1_gpu_memory_lora": (4.0 * b1 * d + 4.0 * d * r + 4.0 * b1 * r) / mem - 1.0,
        "s1_gpu_memory_rank": 4.0 * (b1 + b2) * r / mem - 1.0,
        "s2_cxl_time": (t["T_CXL_S2"] - t["T_GPU_S2"]) / scale,
        "s2_gpu_memory_lora": (4.0 * (b1 + b2) * r + 4.0 * r * d + 4.0 * (b1 + b2) * d) / mem - 1.0,
        "gpu_time_positive": 1.0 - (b1 + b2) + 0.0 * b3,
    }


def _feasible(p: CxlLoraProblem, b1: object, b2: object, b3: object) -> np.ndarray:
    ok = np.ones(np.broadcast(b1, b2, b3).shape, dtype=bool)
    for value in constraint_values(p, b1, b2, b3).values():
        ok &= value <= 1e-12
    return ok


def throughput(p: CxlLoraProblem, b1: object, b2: object, b3: object) -> np.ndarray:
    """Batches per second of GPU time; 0 where the GPU does nothing (infeasible anyway)."""
    t = stage_times(p, b1, b2, b3)
    gpu = t["T_GPU_S1"] + t["T_GPU_S2"]
    return np.where(gpu > 0, (b1 + b2 + b3) / np.where(gpu > 0, gpu, 1.0), 0.0)


def best_b3(p: CxlLoraProblem, b1: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """The largest feasible b3 on the grid for each (b1, b2); -1 where none is (b3 = 0 fails)."""
    if p.total_batch:
        b3 = p.total_batch - b1 - b2
        return np.where((b3 >= 0) & (b3 <= p.b_max) & _feasible(p, b1, b2, np.maximum(b3, 0)), b3, -1.0)
    d, r, bw = p.d, p.r, p.bandwidth_bytes_per_s
    per_b3 = 4.0 * d / bw + 2.0 * d * r / p.cxl_flops  # CXL seconds per unit of b3, both stages
    t = stage_times(p, b1, b2, 0.0)
    bounds = [np.full(np.shape(b1 + b2), float(p.b_max)),
              (t["T_GPU_S1"] - t["T_CXL_S1"]) / per_b3,
              (t["T_GPU_S2"] - t["T_CXL_S2"]) / per_b3,
              p.gpu_memory_bytes / (4.0 * d) - b1 - b2]
    b3 = np.floor(np.minimum.reduce(bounds) / p.step) * p.step
    b3 = np.where(_feasible(p, b1, b2, np.maximum(b3, 0)), b3, b3 - p.step)  # rounding at the edge
    return np.where((b3 >= 0) & _feasible(p, b1, b2, np.maximum(b3, 0)), b3, -1.0)


@dataclass(frozen=True, kw_only=True)
class CxlLoraSolution:
    """A solver's answer: the batches, the throughput, the times and which constraints bind."""

    method: str
    b1: int
    b2: int
    b3: int
    throughput: float  # (b1 + b2 + b3) per second of GPU time
    times_s: dict[str, float]  # T_CXL_S2 clamped at 0; T_CXL_S2_as_written beside it
    constraints: dict[str, float]  # relative values, <= 0 feasible
    binding: tuple[str, ...]  # constraints (and bounds) that one more grid step would break
    evaluated: int  # points scored


def _moves(p: CxlLoraProblem) -> list[np.ndarray]:
    """Grid steps from a point: one batch up (free), or one step from one batch to another (fixed total)."""
    unit = np.eye(3) * p.step
    if not p.total_batch:
        return list(unit)
    return [unit[i] - unit[j] for i in range(3) for j in range(3) if i != j]


def _binding(p: CxlLoraProblem, point: np.ndarray) -> tuple[str, ...]:
    out = [f"b{i + 1} <= b_max" for i in range(3) if point[i] + p.step > p.b_max and not p.total_batch]
    if p.total_batch:
        out.append("b1 + b2 + b3 = total_batch")
    for name in CONSTRAINTS:
        for move in _moves(p):
            moved = point + move
            if moved.min() >= 0 and moved.max() <= p.b_max and constraint_values(p, *moved)[name] > 1e-12:
                out.append(f"{name} ({CONSTRAINTS[name]})")
                break
    return tuple(out)


def _solution(p: CxlLoraProblem, method: str, b1: float, b2: float, b3: float, evaluated: int) -> CxlLoraSolution:
    times = {k: float(v) for k, v in stage_times(p, b1, b2, b3).items()}
    times["T_CXL_S2_as_written"] = times["T_CXL_S2"]
    times["T_CXL_S2"] = max(0.0, times["T_CXL_S2"])
    return CxlLoraSolution(method=method, b1=int(b1), b2=int(b2), b3=int(b3), throughput=float(throughput(p, b1, b2, b3)),
                           times_s=times, constraints={k: float(v) for k, v in constraint_values(p, b1, b2, b3).items()},
                           binding=_binding(p, np.array([b1, b2, b3], dtype=float)), evaluated=evaluated)


def _no_solution(p: CxlLoraProblem, method: str) -> AutotuneError:
    return AutotuneError("cxl-lora", f"{method} found no feasible (b1, b2, b3) with batches up to b_max={p.b_max} in "
                         f"steps of {p.step}: the GPU side must be large enough to hide the {p.latency_s:g} s latency "
                         f"(b1 >= {p.latency_s * p.gpu_flops / (2 * p.d * p.r):.0f}); raise b_max")


def solve_exhaustive(p: CxlLoraProblem) -> CxlLoraSolution:
    """Every (b1, b2) of the grid with its best b3: the reference the Optuna result is checked against."""
    pairs = (p.b_max // p.step + 1) ** 2  # counted before the grid is built: a grid of 1e15 would not fit
    require(pairs <= MAX_EXHAUSTIVE_PAIRS, "step", f"the grid has {pairs:,} (b1, b2) pairs; exhaustive enumeration "
            f"takes at most {MAX_EXHAUSTIVE_PAIRS:,}: raise step or lower b_max")
    grid = p.grid
    best, best_value = None, -np.inf
    chunk = max(1, 2_000_000 // len(grid))
    for start in range(0, len(grid), chunk):
        b1, b2 = grid[start:start + chunk, None], grid[None, :]
        b3 = best_b3(p, b1, b2)
        value = np.where(b3 >= 0, throughput(p, b1, b2, np.maximum(b3, 0)), -np.inf)
        i, j = np.unravel_index(np.argmax(value), value.shape)
        if value[i, j] > best_value:
            best, best_value = (b1[i, 0], b2[0, j], b3[i, j]), value[i, j]
    if best is None:
        raise _no_solution(p, "exhaustive enumeration")
    return _solution(p, "exhaustive", *best, evaluated=pairs)


def _b3_for(p: CxlLoraProblem, b1: int, b2: int) -> float:
    """b3 for a sampled (b1, b2): the fixed total's rest, or the largest feasible (0 if none)."""
    if p.total_batch:
        return float(p.total_batch - b1 - b2)
    return max(0.0, float(best_b3(p, np.float64(b1), np.float64(b2))))


def b2_upper(p: CxlLoraProblem, b1: float) -> float:
    """The largest b2 on the grid that stage 1's CXL time and the memory limits allow with b3 = 0
    (any b3 > 0 only lowers it); 0 when b1 is too small for any."""
    d, r, mem = p.d, p.r, p.gpu_memory_bytes
    t = stage_times(p, b1, 0.0, 0.0)
    per_b2 = 4.0 * d / p.bandwidth_bytes_per_s + 2.0 * d * r / p.cxl_flops + 4.0 * r / p.bandwidth_bytes_per_s
    bounds = (p.b_max, (t["T_GPU_S1"] - t["T_CXL_S1"]) / per_b2, mem / (4.0 * d) - b1, mem / (4.0 * r) - b1,
              (mem - 4.0 * r * d) / (4.0 * (r + d)) - b1)
    return max(0.0, math.floor(min(bounds) / p.step) * p.step)


def _objective(p: CxlLoraProblem):
    """b1 is sampled on the grid; b2 as a share of the largest b2 that b1 allows (the feasible b2
    are a sliver of [0, b_max]: ~140 of 65536 with the seed's numbers); b3 is the best for both."""
    def objective(trial) -> float:
        b1 = trial.suggest_int("b1", 0, p.b_max, step=p.step)
        b2 = int(math.floor(trial.suggest_float("b2_share", 0.0, 1.0) * b2_upper(p, b1) / p.step) * p.step)
        trial.set_user_attr("b2", b2)
        raw = _b3_for(p, b1, b2)
        b3 = min(max(raw, 0.0), float(p.b_max))
        trial.set_user_attr("b3", b3)
        trial.set_constraint("b3_in_range", max(-raw, raw - p.b_max) / p.step)
        for name, value in constraint_values(p, float(b1), float(b2), b3).items():
            trial.set_constraint(name, float(value))
        return float(throughput(p, float(b1), float(b2), b3))
    return objective


def solve_cxl_lora(p: CxlLoraProblem, *, n_trials: int | None = None, seed: int | None = None,
                   storage: object = None, study_name: str | None = None) -> CxlLoraSolution:
    """Optuna's TPE over (b1, b2) with the seed's constraints set on every trial
    (``trial.set_constraint``); the best feasible trial is the answer."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=p.seed if seed is None else seed)
    study = optuna.create_study(direction="maximize", sampler=sampler, storage=storage,
                                study_name=study_name, load_if_exists=study_name is not None)
    trials = n_trials or p.n_trials
    study.optimize(_objective(p), n_trials=trials)
    try:
        best = study.best_trial
    except ValueError:
        raise _no_solution(p, f"Optuna ({trials} trials)") from None
    return _solution(p, "optuna", best.params["b1"], best.user_attrs["b2"], best.user_attrs["b3"], evaluated=trials)


def format_solution(p: CxlLoraProblem, solutions: list[CxlLoraSolution], *, as_json: bool = False) -> str:
    """The answers as text (or JSON): b1, b2, b3, the throughput, the times and what binds."""
    if as_json:
        return json.dumps({"problem": asdict(p), "solutions": [asdict(s) for s in solutions]}, indent=2)
    mode = f"b1 + b2 + b3 = {p.total_batch}" if p.total_batch else "free total"
    lines = [f"cxl-lora (seed 000): maximise (b1+b2+b3)/(T_GPU_S1+T_GPU_S2); batches are integers in "
             f"[0, {p.b_max}], multiples of {p.step}; {mode}"]
    for s in solutions:
        lines += [f"{s.method} ({s.evaluated:,} points scored)",
                  f"  b1 = {s.b1} (GPU)   b2 = {s.b2}   b3 = {s.b3} (CXL)",
                  f"  throughput {s.throughput:.6g} per second of GPU time",
                  "  " + "  ".join(f"{k} {v * 1e6:.4g} us" for k, v in s.times_s.items()),
                  "  binding: " + ("; ".join(s.binding) or "none")]
    exact = [s for s in solutions if s.method == "exhaustive"]
    if exact:
        lines += [f"{s.method} reaches {s.throughput / exact[0].throughput:.4%} of the exhaustive optimum"
                  for s in solutions if s is not exact[0]]
    return "\n".join(lines)


def solve_space(raw: Mapping[str, object], overrides: Mapping[str, str] | None = None, *,
                exhaustive: bool | None = None, storage: object = None, as_json: bool = False) -> str:
    """``autotune search --space cxl-lora``: Optuna, plus the exhaustive check when the grid is
    small enough (``exhaustive=None``) or when asked; the formatted answer."""
    p = problem_from_space(raw, overrides)
    solutions = [solve_cxl_lora(p, storage=storage)]
    if exhaustive or (exhaustive is None and len(p.grid) ** 2 <= MAX_EXHAUSTIVE_PAIRS):
        solutions.append(solve_exhaustive(p))
    return format_solution(p, solutions, as_json=as_json)
