"""One contract suite for every cost model behind autotune.cost.contract.StageCostModel:
training, prefill, decode and serving are held to the same behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost.contract import InferenceCostModel, StageCostModel, TrainingCostModel, phase_cost_models
from autotune.cost.stage import StagePosition
from autotune.graph.table import model_tables
from autotune.plan.plan import StagePlan
from autotune.spec.runtime import Runtime
from autotune.spec.presets import load_preset
from autotune.spec.resolve import inference_workload, resolve_cluster, training_workload

MODEL = load_preset("medium")
CLUSTER = resolve_cluster("dgx-h100")
# neutral settings: the contract is about the cost models, not a framework's knobs
RUNTIME = Runtime(name="neutral")
WORKLOADS = {
    "train": training_workload(MODEL, global_batch=64, seq_len=512),
    "prefill": inference_workload(MODEL, "prefill", batch=16, prompt_len=512),
    "decode": inference_workload(MODEL, "decode", batch=16, prompt_len=512, output_len=64),
    "serve": inference_workload(MODEL, "serve", batch=16, prompt_len=512, output_len=64),
}
MIDDLE = StagePosition(inflight=1.0, neighbors=2, p2p_inter_node=False)


def _models(kind: str, micro_batch=2, num_microbatches=8):
    work = WORKLOADS[kind]
    seq = work.seq_len if kind == "train" else work.prompt_len
    tables = model_tables(MODEL, seq, work.activation_bytes, work.attention_impl)
    return phase_cost_models(tables, work, CLUSTER, runtime=RUNTIME, micro_batch=micro_batch, num_microbatches=num_microbatches)


def _stage(tp=1, layers=(0, 8), dp=1, **extra) -> StagePlan:
    return StagePlan(layers=layers, has_embedding=False, has_head=False, num_gpus=tp * dp, tp=tp, cp=1, dp=dp,
                     sequence_parallel=False, **extra)


@pytest.fixture(params=sorted(WORKLOADS))
def kind(request):
    return request.param


def test_every_phase_is_a_stage_cost_model_with_a_positive_weight(kind):
    phases = _models(kind)
    assert phases and all(isinstance(m, StageCostModel) and w > 0 for w, m in phases)
    expected = TrainingCostModel if kind == "train" else InferenceCostModel
    assert all(isinstance(m, expected) for _, m in phases)
    assert len(phases) == (2 if kind == "serve" else 1)


def test_time_and_memory_are_positive_and_finite(kind):
    for _, model in _models(kind):
        cost = model.stage_cost(_stage(), MIDDLE)
        assert np.isfinite(cost.time.microbatch_s) and cost.time.microbatch_s > 0
        assert np.isfinite(cost.memory.peak_bytes) and cost.memory.peak_bytes > 0
        assert cost.params_per_gpu > 0 and cost.time.step_tail_s >= 0


def test_more_layers_cost_more_time_memory_and_parameters(kind):
    for _, model in _models(kind):
        few, many = model.stage_cost(_stage(layers=(0, 4)), MIDDLE), model.stage_cost(_stage(layers=(0, 12)), MIDDLE)
        assert many.time.microbatch_s > few.time.microbatch_s
        assert many.memory.peak_bytes > few.memory.peak_bytes
        assert many.params_per_gpu == pytest.approx(3 * few.params_per_gpu)


def test_tensor_parallelism_splits_parameters_and_compute(kind):
    for _, model in _models(kind):
        one, two = model.stage_cost(_stage(tp=1), MIDDLE), model.stage_cost(_stage(tp=2), MIDDLE)
        assert two.params_per_gpu < one.params_per_gpu
        assert two.time.compute_s < one.time.compute_s


def test_an_array_of_layer_counts_prices_each_count_as_one_call_would(kind):
    counts = np.arange(1, 6)
    for _, model in _models(kind):
        together = model.stage_cost(_stage(layers=(0, 5)), MIDDLE, num_layers=counts)
        alone = [model.stage_cost(_stage(layers=(0, int(n))), MIDDLE).time.microbatch_s for n in counts]
        np.testing.assert_allclose(np.broadcast_to(together.time.microbatch_s, counts.shape), alone, rtol=1e-9)


def test_an_array_of_micro_batches_broadcasts_like_single_sizes(kind):
    sizes = np.array([1, 2, 4])[:, None]
    batched = [m for _, m in _models(kind, micro_batch=sizes, num_microbatches=16 // sizes)]
    singles = [[m for _, m in _models(kind, micro_batch=int(b), num_microbatches=16 // int(b))] for b in sizes.ravel()]
    for phase, model in enumerate(batched):
        together = np.ravel(model.stage_cost(_stage(), MIDDLE).time.microbatch_s)
        alone = [single[phase].stage_cost(_stage(), MIDDLE).time.microbatch_s for single in singles]
        np.testing.assert_allclose(together, alone, rtol=1e-9)


def test_more_micro_batches_in_flight_hold_more_memory(kind):
    for _, model in _models(kind):
        held = [model.stage_cost(_stage(), StagePosition(inflight=k, neighbors=2, p2p_inter_node=False)).memory.peak_bytes
                for k in (1.0, 4.0)]
        assert held[1] > held[0]


def test_stage_memory_is_the_stage_costs_memory(kind):
    """stage_memory may price memory without time (MoE stages do): the same bytes, field by field,
    for every layer count at once and for none and one micro-batch in flight."""
    counts = np.arange(1, 6)
    both = StagePosition(inflight=np.array([0.0, 1.0]).reshape(2, 1, 1), neighbors=1, p2p_inter_node=True)
    moe = MODEL.is_moe
    stages = [_stage(), _stage(tp=2, dp=2)] + ([_stage(tp=2, dp=2, ep=2, etp=2)] if moe else [])
    if kind == "train":  # the training choices: recomputation, ZeRO, FP8, partial recomputation
        stages += [_stage(tp=2, dp=2, zero=1, recompute="full"), _stage(dp=4, zero=3, recompute="selective"),
                   _stage(dp=4, recompute="full", recompute_layers=2), _stage(dp=2, zero=1, fp8=True)]
        stages += [_stage(dp=4, ep=4, zero=1, recompute="full", fp8=True)] if moe else []
    for _, model in _models(kind, micro_batch=np.array([[1], [2]])):
        for stage in stages:
            for pos, n in ((MIDDLE, None), (both, counts)):
                whole, alone = model.stage_cost(stage, pos, num_layers=n).memory, model.stage_memory(stage, pos, num_layers=n)
                for name, value in vars(whole).items():
                    assert np.array_equal(np.broadcast_to(getattr(alone, name), np.shape(value)), value), (stage, name)
