"""The cost model's one interface: price a stage (its layers, submesh and choice) at a pipeline
position -> time, memory and their breakdown (:class:`~autotune.cost.stage.StageCost`).

Training (autotune.cost.stage) and inference (autotune.cost.inference) implement it; the
search and ``evaluate`` ask :func:`phase_cost_models` for the weighted phases of a workload
instead of testing its kind, and one contract suite (tests/test_cost_contract.py) runs
against every implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from autotune.cost.memory import StageMemory
from autotune.cost.recompute import fp8_context, has_variant, plain_stage, variant_stage_cost
from autotune.cost.runtime_kernels import kernel_runtime, runtime_cluster
from autotune.cost.dense_stage import dense_stage_cost, dense_stage_memory
from autotune.cost.stage import StageContext, StageCost, StagePosition
from autotune.graph.table import ModelTables
from autotune.plan.plan import StagePlan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

if TYPE_CHECKING:
    from autotune.cost.inference import InferenceContext

# The MoE and inference models (cost/moe_stage.py, cost/inference*.py) are imported where a stage
# or workload of theirs is priced: a dense training search never loads them (tests/test_lazy_imports.py).

__all__ = ["StageCostModel", "TrainingCostModel", "InferenceCostModel", "phase_cost_models", "stage_cost",
           "stage_memory", "inference_stage_cost"]


def stage_cost(ctx: StageContext, stage: StagePlan, pos: StagePosition, num_layers=None) -> StageCost:
    """A training stage's time and memory: FP8 or partial recomputation (cost/recompute.py)
    blends the plain stage's costs, MoE stages go to cost/moe_stage.py, dense ones to cost/stage.py."""
    if has_variant(stage):
        return variant_stage_cost(stage_cost, ctx, stage, pos, num_layers)
    if ctx.tables.moe_layer is not None:
        from autotune.cost.moe_stage import moe_stage_cost

        return moe_stage_cost(ctx, stage, pos, num_layers)
    return dense_stage_cost(ctx, stage, pos, num_layers)


def stage_memory(ctx: StageContext, stage: StagePlan, pos: StagePosition, num_layers=None) -> StageMemory:
    """``stage_cost(...).memory``, without pricing the time where the model has a path for memory
    alone (dense and MoE stages, FP8 included: cost/dense_stage.py dense_stage_memory and
    cost/moe_stage.py moe_stage_memory run the same memory code); partial recomputation blends two
    whole costs and offloading stages are priced whole."""
    if not stage.recompute_layers:  # FP8 prices the plain stage in an FP8 context (cost/recompute.py)
        priced_in, plain = (fp8_context(ctx), plain_stage(stage)) if stage.fp8 else (ctx, stage)
        if ctx.tables.moe_layer is not None:
            from autotune.cost.moe_stage import moe_stage_memory as memory
        else:
            memory = dense_stage_memory
        found = memory(priced_in, plain, pos, num_layers)
        if found is not None:
            return found
    return stage_cost(ctx, stage, pos, num_layers).memory


def inference_stage_cost(ctx: InferenceContext, stage: StagePlan, pos: StagePosition, num_layers=None) -> StageCost:
    """One prefill micro-batch or decode step through a stage: MoE stages go to cost/inference_moe.py."""
    from autotune.cost.inference import check_inference_stage, dense_inference_stage_cost

    if ctx.tables.moe_layer is not None:
        from autotune.cost.inference_moe import moe_inference_stage_cost

        check_inference_stage(stage, ctx.phase)
        return moe_inference_stage_cost(ctx, stage, pos, num_layers)
    return dense_inference_stage_cost(ctx, stage, pos, num_layers)


@runtime_checkable
class StageCostModel(Protocol):
    """Prices one pipeline stage.

    ``stage_cost(stage, position, num_layers=None)``: the time of one micro-batch through
    ``stage`` (``time.microbatch_s``) and what it adds once per step (``time.step_tail_s``),
    its peak memory per GPU with ``position.inflight`` micro-batches held, parameters per GPU
    and kernel times. ``num_layers`` (a number or a numpy array) overrides the stage's layer
    count, so one call prices every layer count; the context's micro-batch may be an array
    too, and every returned quantity broadcasts over both. Pure: no I/O, no state.
    """

    def stage_cost(self, stage: StagePlan, position: StagePosition, num_layers: object = None) -> StageCost: ...

    def stage_memory(self, stage: StagePlan, position: StagePosition, num_layers: object = None) -> StageMemory:
        """``stage_cost(...).memory``, which an implementation may price without the time."""
        ...


@dataclass(frozen=True)
class TrainingCostModel:
    """A training step's forward, backward, gradient sync and optimizer (autotune.cost.stage)."""

    context: StageContext

    def stage_cost(self, stage: StagePlan, position: StagePosition, num_layers: object = None) -> StageCost:
        return stage_cost(self.context, stage, position, num_layers=num_layers)

    def stage_memory(self, stage: StagePlan, position: StagePosition, num_layers: object = None) -> StageMemory:
        """The stage's memory alone (as stage_cost's), priced without its time where that is cheaper."""
        return stage_memory(self.context, stage, position, num_layers=num_layers)


@dataclass(frozen=True)
class InferenceCostModel:
    """One prefill pass or one decode step (autotune.cost.inference)."""

    context: InferenceContext

    def stage_cost(self, stage: StagePlan, position: StagePosition, num_layers: object = None) -> StageCost:
        return inference_stage_cost(self.context, stage, position, num_layers=num_layers)

    def stage_memory(self, stage: StagePlan, position: StagePosition, num_layers: object = None) -> StageMemory:
        return self.stage_cost(stage, position, num_layers=num_layers).memory


def phase_cost_models(tables: ModelTables, workload: TrainingWorkload | InferenceWorkload, cluster: ClusterSpec, *,
                      runtime: Runtime, micro_batch: object, num_microbatches: object,
                      overlap_tp_comm: bool = False) -> list[tuple[float, StageCostModel]]:
    """(weight, cost model) per phase of a step: training is one phase; serving is the prefill
    plus ``decode_steps`` decode steps (static batching); prefill and decode are one each."""
    cluster = runtime_cluster(cluster, kernel_runtime(runtime, tables))
    if isinstance(workload, TrainingWorkload):
        context = StageContext(tables=tables, workload=workload, runtime=runtime, cluster=cluster, micro_batch=micro_batch,
                               overlap_grad_reduce=runtime.overlap_grad_reduce, overlap_param_gather=runtime.overlap_param_gather,
                               overlap_p2p_comm=runtime.overlap_p2p_comm,
                               overlap_tp_backward=runtime.overlap_tp_backward,
                               num_microbatches=num_microbatches, overlap_tp_comm=overlap_tp_comm)
        return [(1.0, TrainingCostModel(context))]

    from autotune.cost.inference import inference_context, workload_phases

    out: list[tuple[float, StageCostModel]] = []
    for phase in workload_phases(workload):
        weight = 1.0 if (phase == "prefill" or workload.kind == "decode") else float(workload.decode_steps)
        context = inference_context(tables.model, workload, cluster, phase, runtime=runtime, micro_batch=micro_batch,
                                    num_microbatches=num_microbatches)
        out.append((weight, InferenceCostModel(context)))
    return out
