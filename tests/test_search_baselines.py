"""Baselines: the tuned ones skip plans that recompute more than a fitting one, and pick what
scoring every plan picks."""

import pytest

from autotune.search import baselines as B
from autotune.search.driver import SearchProblem
from autotune.search.space import load_space
from autotune.spec.presets import load_preset
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import Runtime

# (model, GPUs, cluster, global batch): memory binds in some (recomputation or ZeRO is what fits), not in others
CASES = [("large", 16, "dgx-h100", None), ("large", 64, "dgx-a100-40gb", 64), ("xl", 8, "dgx-a100-40gb", 32),
         ("2.7b", 8, "dgx-a100-40gb", 32), ("llama3-8b", 16, "dgx-a100-80gb", 32)]


def _problem(name, gpus, cluster, global_batch):
    model = load_preset(name)
    return SearchProblem(model=model, workload=training_workload(model, global_batch=global_batch),
                         runtime=Runtime(name="megatron"), cluster=resolve_cluster(cluster), gpus=gpus, space=load_space())


def _degrees(problem):
    tp = B._megatron_tp(problem)
    return [(t, pp, zeros) for t, zeros in ((1, (0, 1, 3)), (tp, (1,))) for pp in (1, 2, 4)
            if problem.gpus % (t * pp) == 0]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_recomputing_more_is_never_faster_where_less_fits(case):
    """What _tuned's skipping rests on: at a fixed ZeRO stage and micro-batch, a plan recomputing
    more is no faster than one recomputing less that fits."""
    problem, checked = _problem(*case), 0
    for tp, pp, zeros in _degrees(problem):
        sizes = B._micro_batches(problem, problem.gpus // (tp * pp))
        for z in zeros:
            for b in sizes:
                scored = [B._score(problem, tp=tp, pp=pp, zero=z, recompute=r, micro_batch=b) for r in B._RECOMPUTE_ORDER]
                for i, less in enumerate(scored):
                    for more in scored[i + 1:]:
                        if less is not None and more is not None and less[1].fits:
                            assert more[1].step_time_s >= less[1].step_time_s
                            checked += 1
    assert checked > 0


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_tuned_picks_what_scoring_every_plan_picks(case):
    problem, skipped = _problem(*case), 0
    for tp, pp, zeros in _degrees(problem):
        sizes = B._micro_batches(problem, problem.gpus // (tp * pp))
        every = [B._score(problem, tp=tp, pp=pp, zero=z, recompute=r, micro_batch=b)
                 for z in zeros for r in B._RECOMPUTE_ORDER for b in sizes]
        plan, estimate = B._tuned(problem, tp=tp, pp=pp, zeros=zeros)
        want_plan, want = B._first_fitting(iter(every))
        assert (plan is None) == (want_plan is None)
        if plan is not None:
            assert plan == want_plan and estimate.step_time_s == want.step_time_s and estimate.fits == want.fits
        skipped += len(every) - len(list(B._recomputing_less_first(problem, tp, pp, zeros, sizes)))
    assert skipped > 0  # the cases exercise the skipping
