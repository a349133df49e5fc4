"""Accuracy on this machine kind: six plans of a small GPT, predicted with the shipped CPU
profile (the ``cpu`` cluster) and measured for real over 2 gloo workers.

Every plan's losses must match the single process and its peak memory must be within 20%
of the prediction, whatever the machine is doing. Step time needs the machine to itself:
plans run in two interleaved rounds, each keeps its least disturbed round, and time is
compared net of the workers' run-queue wait (time another process held their CPU). The
step-time targets are checked when other processes took at most BUSY_CORES cores that the
workers needed during those runs (measured from /proc/stat); on a busier machine they are
skipped with the figures, since wall time then measures the load. A virtual machine's host can
slow everything while no process here is busy, so a probe GEMM is timed before and after each
round (autotune.validate.probe) and the step-time targets are skipped, with the figures, when
the machine runs it slower than profiled by more than the GEMM fit's own scatter.

Measured on this machine kind with the shipped profile: mean |error| 7% net of run-queue
wait (10% wall), Spearman 0.94; the largest error is TP=2 (-30%: DTensor's host overhead is
not modelled, docs/validation.md).
"""

import os
import statistics

import pytest

pytest.importorskip("torch")

from autotune.spec.resolve import resolve_cluster  # noqa: E402
from autotune.validate.probe import machine_slowdown  # noqa: E402
from autotune.validate.report import format_table  # noqa: E402
from autotune.validate.runner import ValidateOptions  # noqa: E402
from autotune.validate.suite import best_of_rounds, run_suite, suite_figures, with_suite_steps  # noqa: E402

BUSY_CORES = 0.25  # other processes' CPU during a run above which its timing is not trusted


@pytest.fixture(scope="module")
def suite():
    cluster = resolve_cluster("cpu")
    options = with_suite_steps(ValidateOptions(cluster=cluster, max_world=2, timeout_s=240.0))
    slowdowns, rounds = [machine_slowdown(cluster.device)], []
    for _ in range(2):  # the probe brackets each round
        rounds += run_suite(options, rounds=1)
        slowdowns.append(machine_slowdown(cluster.device))
    best = best_of_rounds(rounds)
    table = {r.name: (r.status, r.predicted_step_time_s, r.measured_net_step_time_s, r.memory_error_pct,
                      r.external_load_cores) for r in best}
    return best, suite_figures(best) | {"probe_slowdowns": slowdowns}, table


def _skip_if_busy(best, figures, table):
    """Skip when other processes took CPU the workers needed (more than BUSY_CORES beyond the
    cores the plan's workers left free), or when the machine itself ran slower than profiled:
    the probe GEMM (autotune.validate.probe; two workers at once, like the plans) took longer
    than the profile's GEMM fit by more than that fit's own residual RMS, in the median probe."""
    spare = os.cpu_count() or 1
    contention = max(r.external_load_cores + r.world_size - spare for r in best)
    if contention > BUSY_CORES:
        pytest.skip(f"other processes took {contention:.2f} cores the workers needed; step times measured the "
                    f"load: {figures} {table}")
    scatter = resolve_cluster("cpu").device.regression("gemm", "fp32").residual_rel_std
    slowdown = statistics.median(figures["probe_slowdowns"])
    if slowdown > 1.0 + scatter:
        pytest.skip(f"the machine ran the profiled GEMM {slowdown:.2f}x as long as profiled (beyond the fit's "
                    f"{100 * scatter:.1f}% scatter; a busy host): step times measured the host: {figures} {table}")


@pytest.mark.slow
def test_every_plan_runs_matches_numerics_and_memory(suite):
    best, figures, table = suite
    assert [r.status for r in best] == ["ok"] * 6, table  # "ok": losses within tolerance of the single process
    assert figures["memory_max_abs_error_pct"] <= 20.0, (figures, table)


@pytest.mark.slow
def test_step_time_targets(suite):
    best, figures, table = suite
    _skip_if_busy(best, figures, table)
    assert figures["net_mean_abs_error_pct"] <= 15.0 and figures["net_spearman"] >= 0.8, (
        f"{figures}\n{format_table(best)}")
