"""The accuracy suite: six plans of a small GPT that a 2-core machine can run, measured in
interleaved rounds so that a burst of load on a shared machine hits every plan alike.

The model is the ``small`` preset (seed 002) narrowed to 4 layers of hidden 256 (the shape
``--scale`` gives it), trained in fp32 on batches of 8 x 256 tokens: steps of about half a
second on one core, long enough that per-call overheads do not dominate.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace

from autotune.plan.builders import uniform_plan
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset
from autotune.spec.workload import TrainingWorkload
from autotune.validate.report import PlanResult, spearman
from autotune.validate.runner import PlanCase, ValidateOptions, run_case

__all__ = ["suite_model", "suite_cases", "run_suite", "best_of_rounds", "suite_figures"]

GLOBAL_BATCH = 8
SEQ_LEN = 256


def suite_model() -> ModelSpec:
    return load_preset("small").with_changes(num_layers=4, hidden_size=256, num_heads=4, num_kv_heads=4,
                                             ffn_hidden_size=1024, vocab_size=2048, max_seq_len=SEQ_LEN)


def suite_cases() -> list[PlanCase]:
    """Single process; DP=2; TP=2 with SP; PP=2 with 4 micro-batches under 1F1B; FSDP (ZeRO-3)
    over 2 ranks; DP=2 with full recomputation."""
    model = suite_model()
    workload = TrainingWorkload(global_batch=GLOBAL_BATCH, seq_len=SEQ_LEN, dtype="fp32")
    degrees = {
        "single": dict(gpus=1, micro_batch=8),
        "dp2": dict(gpus=2, micro_batch=4),
        "tp2-sp": dict(gpus=2, tp=2, sequence_parallel=True, micro_batch=8),
        "pp2-1f1b-mb4": dict(gpus=2, pp=2, micro_batch=2),
        "fsdp2": dict(gpus=2, zero=3, micro_batch=4),
        "dp2-recompute": dict(gpus=2, recompute="full", micro_batch=4),
    }
    return [PlanCase(name=name, source="suite", model=model, workload=workload,
                     plan=uniform_plan(num_layers=model.num_layers, global_batch=GLOBAL_BATCH, **kw))
            for name, kw in degrees.items()]


def run_suite(options: ValidateOptions, rounds: int = 2, progress: Callable[[str], None] = lambda text: None,
              cache: dict | None = None) -> list[list[PlanResult]]:
    """``rounds`` passes over the suite, plans interleaved; results[round][plan]. ``cache`` keeps the
    single-process reference losses (run_case's): pass one dict to calls that run further rounds
    (with a probe between them) and the reference runs once."""
    cache = {} if cache is None else cache
    results = []
    for round_index in range(rounds):
        row = []
        for case in suite_cases():
            row.append(run_case(case, options, cache))
            progress(f"round {round_index + 1}: {case.name} {row[-1].status}")
        results.append(row)
    return results


def best_of_rounds(results: list[list[PlanResult]]) -> list[PlanResult]:
    """Per plan, the round least disturbed by other load: the smallest net step time."""
    best = []
    for runs in zip(*results):
        ran = [r for r in runs if r.measured_net_step_time_s is not None]
        best.append(min(ran, key=lambda r: r.measured_net_step_time_s) if ran else runs[0])
    return best


def suite_figures(best: list[PlanResult]) -> dict[str, float | None]:
    """Mean |error| and Spearman of step time (wall and net of run-queue wait) and the largest
    memory error, over the plans that ran."""
    ran = [r for r in best if r.measured_step_time_s is not None and r.predicted_step_time_s is not None]
    predicted = [r.predicted_step_time_s for r in ran]
    wall = [r.measured_step_time_s for r in ran]
    net = [r.measured_net_step_time_s for r in ran]
    err = lambda p, m: 100.0 * abs(p - m) / m  # noqa: E731
    return {
        "plans_ran": len(ran),
        "wall_mean_abs_error_pct": statistics.fmean(map(err, predicted, wall)) if ran else None,
        "wall_spearman": spearman(predicted, wall),
        "net_mean_abs_error_pct": statistics.fmean(map(err, predicted, net)) if ran else None,
        "net_spearman": spearman(predicted, net),
        "memory_max_abs_error_pct": max((abs(r.memory_error_pct) for r in ran if r.memory_error_pct is not None),
                                        default=None),
        "run_queue_share_pct": statistics.fmean(100 * r.measured_run_queue_s / r.measured_step_time_s for r in ran)
        if ran else None,
    }


def with_suite_steps(options: ValidateOptions) -> ValidateOptions:
    """Steps that keep a round under a minute on 2 cores: 3 numerics, 1 warm-up, 4 timed."""
    return replace(options, numerics_steps=3, warmup_steps=1, measured_steps=4)
