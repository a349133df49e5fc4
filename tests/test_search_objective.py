"""The stage DP's objective is the estimate's step (autotune.search.inter_op, cost.evaluate.
assemble_estimate: stage times through the schedule plus the largest tail of any stage), and
never above it: every slice's best 1F1B plan scored by the cost model, where its stages send
over the links its tables price equal to it, and where stages of less than a node make a
pipeline over several nodes (some sends within a node, some across) at most it, so that the
floors and slice bounds built from the tables bound the estimate."""

import math

import pytest

from autotune.search.driver import SearchProblem, SliceSearch
from autotune.search.space import load_space
from autotune.spec.presets import resolve_model
from autotune.spec.resolve import resolve_cluster, training_workload
from autotune.spec.runtime import resolve_runtime


def _slice_search(name: str, gpus: int, cluster: str) -> SliceSearch:
    model, runtime = resolve_model(name), resolve_runtime(None)
    workload = training_workload(model, global_batch=None, seq_len=None, dtype="bf16", attention=runtime.attention_impl)
    problem = SearchProblem(model=model, workload=workload, runtime=runtime, cluster=resolve_cluster(cluster, None),
                            gpus=gpus, space=load_space(runtime.space))
    return SliceSearch(problem)


# the warm loop's model: deep pipelines on 1024 GPUs (the last stage, with the head, has the
# largest tail), and 4-GPU stages two to a node on 96 (every other send crosses nodes)
@pytest.mark.parametrize("gpus", [96, 1024])
def test_dp_objective_is_the_estimates_step(gpus):
    search = _slice_search("large", gpus, "dgx-h100")
    node = search.problem.cluster.gpus_per_node
    exact = floors = tail_not_first = 0
    for key in search.keys:
        best = search.uniform._best_pipeline(key, math.inf)
        if best is None:
            continue
        objective, _, member, solution = best
        plan = search.uniform._plan_of(key, best)
        estimate = search.evaluate(plan)
        assert objective <= estimate.step_time_s * (1 + 1e-12), key
        if plan.stages[0].num_gpus < node < plan.gpus:  # sends over both links: priced by the faster
            floors += 1
            assert objective >= estimate.step_time_s * (1 - 0.01), key  # the send share of a step
        else:
            exact += 1
            assert objective == pytest.approx(estimate.step_time_s, rel=1e-12), key
        tails = [s.time_s["dp_comm_s"] + s.time_s["optimizer_s"] for s in estimate.stages]
        tail_not_first += max(tails) > tails[0] * (1 + 1e-9)
    if gpus == 1024:
        assert exact and tail_not_first, "a pipeline whose largest tail is not the first stage's"
    else:
        assert floors, "sub-node stages over several nodes"
