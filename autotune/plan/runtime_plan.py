"""A plan from Megatron-style degrees as a runtime runs it where the run does not say.

What a user leaves out (the ZeRO stage, the micro-batch of a pipelined step, what is overlapped,
whether FSDP reshards after forward, interleaving, what "selective" recomputes, how layers that
the pipeline does not divide are placed) is the runtime's (autotune.spec.runtime.Runtime), so
``autotune evaluate --runtime R`` and ``check-published`` build the same plan from the same cells.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autotune.plan.builders import uniform_plan
from autotune.plan.plan import Plan
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime

__all__ = ["runtime_plan", "runtime_plan_options", "with_embedding_loss_slots"]


def runtime_plan_options(runtime: Runtime, *, tp: int, pp: int, training: bool, dtype: str = "bf16") -> dict[str, Any]:
    """Plan options the runtime decides: what it overlaps, its context-parallel exchange, resharding."""
    reshard = {"always": True, "never": False, "unless_pipelined": pp == 1}[runtime.reshard_after_forward]
    tp_overlap = runtime.overlap_tp_comm and tp > 1 and training and dtype not in runtime.no_tp_overlap_dtypes
    return {"overlap_grad_reduce": runtime.overlap_grad_reduce, "overlap_param_gather": runtime.overlap_param_gather,
            "overlap_p2p_comm": runtime.overlap_p2p_comm, "overlap_tp_comm": tp_overlap,
            "overlap_tp_backward": runtime.overlap_tp_backward, "cp_comm": runtime.cp_comm,
            "reshard_after_forward": reshard}


def with_embedding_loss_slots(plan: Plan) -> Plan:
    """The plan of ``num_layers + 2`` slots with one layer fewer on the first stage (the embedding's
    slot) and one fewer on the last (the loss's)."""
    stages, last = [], len(plan.stages) - 1
    for i, stage in enumerate(plan.stages):
        first, end = stage.layers
        stages.append(replace(stage, layers=(max(first - 1, 0), end - 1 - (i == last))))
    return plan.with_changes(stages=tuple(stages))


def _split(runtime: Runtime, model: ModelSpec, chunks: int) -> tuple[ModelSpec, int]:
    """(the model as priced, extra slots): 2 slots where the embedding and the loss make the layers split
    into ``chunks``; else the layers rounded up to a multiple of ``chunks``: an uneven split (Megatron's
    decoder_first/last_pipeline_num_layers or pipeline layout, torchtitan's split points) runs at the pace
    of its fullest chunk, at most pp x vpp - 1 layers' work added (what check-published has always assumed)."""
    layers = model.num_layers
    if not layers % chunks:
        return model, 0
    if runtime.pipeline_split == "embedding_loss_slots" and not (layers + 2) % chunks:
        return model, 2
    return model.with_changes(num_layers=-(-layers // chunks) * chunks), 0


def runtime_plan(runtime: Runtime, model: ModelSpec, *, gpus: int, global_batch: int, training: bool = True, dtype: str = "bf16",
                 tp: int = 1, pp: int = 1, dp: int | None = None, cp: int = 1, vpp: int | None = None,
                 micro_batch: int | None = None, zero: int | None = None, recompute: str = "none",
                 sequence_parallel: bool | None = None, **options: Any) -> tuple[ModelSpec, Plan]:
    """(the model as priced, the plan): ``None`` arguments and options not given are the runtime's."""
    vpp = vpp or (runtime.vpp_default if pp > 1 and training else 1)
    replicas = dp or max(1, gpus // max(1, tp * pp * cp))
    if micro_batch is None:  # one sequence, or the local batch in pp micro-batches where the runtime splits so
        split = runtime.pipeline_microbatches == "stages" and pp > 1 and training
        # inference without a pipeline runs the replica's whole batch in one pass (transformers'
        # generate, the serving engines' batches), not one sequence after another
        whole = not training and pp == 1
        micro_batch = max(1, global_batch // replicas // pp) if split or whole else 1
    if recompute == "selective" and training:
        recompute = runtime.selective_recompute
    zero = (runtime.zero_default if training else 0) if zero is None else zero
    if zero == 2 and runtime.zero2_keeps_params:  # FSDP SHARD_GRAD_OP: parameters sharded, kept gathered for the step
        zero, options = 3, {"reshard_after_forward": False, **options}
    sp = (tp > 1 and training) if sequence_parallel is None else sequence_parallel
    model, slots = _split(runtime, model, pp * vpp) if training else (model, 0)
    plan = uniform_plan(num_layers=model.num_layers + slots, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp,
                        micro_batch=micro_batch, global_batch=global_batch, sequence_parallel=sp, recompute=recompute,
                        zero=zero, has_embeddings=model.has_embeddings,
                        **{**runtime_plan_options(runtime, tp=tp, pp=pp, training=training, dtype=dtype), **options})
    return model, with_embedding_loss_slots(plan) if slots else plan
