"""A plan as a DeepSpeed JSON config (``deepspeed.initialize(config=...)``).

Target: DeepSpeed 0.19.8 (PyPI). Keys are the ones docs/_pages/config-json.md documents, plus
``tensor_parallel.autotp_size`` (AutoTP training, deepspeed/runtime/tensor_parallel/config.py);
tests load every export with DeepSpeed's own ``DeepSpeedConfig`` given the data-parallel size
(tests/test_export_consumers.py).

The JSON file alone cannot express, so these are refused:

- pipeline parallelism: stages are built in code (``deepspeed.pipe.PipelineModule(layers=...,
  num_stages=...)``), and its pipeline engine refuses ZeRO-2 and ZeRO-3 (runtime/pipe/engine.py);
- context parallelism: DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads, set
  up in the model code), not ring context parallelism;
- tensor parallelism with sequence parallelism: AutoTP shards the linear layers only (norms and
  activations stay whole). AutoTP with ZeRO-3 is supported since 0.18 (runtime/engine.py
  partitions AutoTP shards over the data-parallel group), so tp > 1 goes with any ZeRO stage;
- selective recomputation: DeepSpeed recomputes whole checkpointed functions.

``train_batch_size`` = micro-batch x gradient accumulation x data-parallel degree.

JSON has no comments, so the file states its target and plan under ``"_autotune"``, a key
DeepSpeed does not read (the tests check it is the only such key).
"""

from __future__ import annotations

import json

from autotune.outputs.export.common import (
    MAPPED_STAGE_FIELDS, ExportContext, ExportResult, check_mesh_order, export_context, header_lines, refuse,
    require_placements)
from autotune.plan.io import PlanFile

__all__ = ["to_deepspeed"]

NAME = "DeepSpeed"
TARGET = "DeepSpeed 0.19.8 (PyPI) JSON config, deepspeed.initialize(config=FILE)"
VERSION = "0.19.8"
PLAN_FIELDS = ("overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm", "overlap_p2p_comm")


def _check_expressible(ctx: ExportContext) -> None:
    p, s = ctx.plan, ctx.stage
    if not ctx.runtime.grad_reduce_in_fp32:
        raise refuse(NAME, "runtime.grad_reduce_in_fp32", "the exported config keeps DeepSpeed's gradient "
                                                           "accumulation and reduction dtype (no data_types key is mapped)")
    if ctx.model.is_moe and (s.ep > 1 or s.etp > 1):
        raise refuse(NAME, "stages.ep", "its JSON config has no expert-parallel setting: experts and their "
                                        "ep_size are built in model code (deepspeed.moe.layer.MoE), and it has "
                                        "no tensor parallelism inside experts")
    if p.pp > 1:
        raise refuse(NAME, "stages", f"pp={p.pp}: its pipeline stages are built in code "
                                     "(deepspeed.pipe.PipelineModule), "
                                     "not in the JSON config, and its pipeline engine refuses ZeRO-2/3")
    if s.cp > 1:
        raise refuse(NAME, "stages.cp", "its sequence parallelism is Ulysses (all-to-all over heads, set up in model "
                                        "code), not ring context parallelism")
    if s.tp > 1 and s.sequence_parallel:
        raise refuse(NAME, "stages.sequence_parallel", "AutoTP training (tensor_parallel.autotp_size) shards linear "
                                                       "layers only; sequence parallelism of norms and activations "
                                                       "has no setting")
    if s.recompute in ("selective", "selective_op"):
        raise refuse(NAME, "stages.recompute", "its activation checkpointing recomputes whole checkpointed "
                                               "functions; selective recomputation has no setting")


def _offload(ctx: ExportContext) -> dict:
    s = ctx.stage
    require_placements(ctx, {"weights_in": ("hbm", "host"), "optimizer_in": ("hbm", "host"),
                             "gradients_in": ("hbm", "host"), "activations_in": ("hbm", "host")},
                       "DeepSpeed offloads to CPU memory or NVMe, and has no CXL placement")
    table = {}
    if s.weights_in == "host":
        if s.zero != 3:
            raise refuse(NAME, "stages.weights_in", "it offloads parameters only under ZeRO-3 (offload_param)")
        table["offload_param"] = {"device": "cpu", "pin_memory": True}
    if s.optimizer_in == "host":
        if s.zero == 0:
            raise refuse(NAME, "stages.optimizer_in", "its optimizer offload (ZeRO-Offload) needs ZeRO stage 1-3")
        table["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    elif s.gradients_in == "host":
        raise refuse(NAME, "stages.gradients_in", "gradients leave the GPU only with the optimizer (offload_optimizer)")
    return table


def _activation_checkpointing(ctx: ExportContext) -> dict:
    s = ctx.stage
    if s.activations_in == "host" and s.recompute != "full":
        raise refuse(NAME, "stages.activations_in",
                     "it moves activations to the host only as checkpoints "
                     "(activation_checkpointing.cpu_checkpointing), i.e. with full recomputation")
    if s.recompute != "full":
        return {}
    return {"activation_checkpointing": {
        "partition_activations": False, "cpu_checkpointing": s.activations_in == "host",
        "contiguous_memory_optimization": False, "number_checkpoints": ctx.model.num_layers,
        "synchronize_checkpoint_boundary": False, "profile": False}}


def _config(ctx: ExportContext) -> dict:
    p, s, w = ctx.plan, ctx.stage, ctx.workload
    config: dict = {"train_batch_size": p.micro_batch * p.num_microbatches * s.dp,
                    "train_micro_batch_size_per_gpu": p.micro_batch,
                    "gradient_accumulation_steps": p.num_microbatches}
    if w.dtype in ("bf16", "fp16"):
        config[w.dtype] = {"enabled": True}
    config["zero_optimization"] = {"stage": s.zero, "overlap_comm": p.overlap_grad_reduce, **_offload(ctx)}
    if s.tp > 1:
        config["tensor_parallel"] = {"autotp_size": s.tp}
    config.update(_activation_checkpointing(ctx))
    return config


def _notes(ctx: ExportContext) -> list[str]:
    s = ctx.stage
    notes = ["the model shape and data are in your training script; "
             "this config sets batch, precision, ZeRO and offload"]
    if ctx.model.is_moe:
        notes.append(f"mixture of experts: build each MoE layer with deepspeed.moe.layer.MoE(num_experts="
                     f"{ctx.model.num_experts}, k={ctx.model.num_experts_per_token}, ep_size=1) in the model code")
    if s.tp > 1:
        notes.append(f"AutoTP: call deepspeed.tp_model_init(model, tp_size={s.tp}, dtype=...) "
                     "before deepspeed.initialize")
    if s.recompute == "full":
        notes.append("full recomputation takes effect when each transformer layer runs under "
                     "deepspeed.checkpointing.checkpoint (or the model's gradient checkpointing)")
    return notes


def to_deepspeed(plan_file: PlanFile) -> ExportResult:
    ctx = export_context(plan_file, NAME, plan_fields=PLAN_FIELDS, stage_fields=MAPPED_STAGE_FIELDS + ("ep", "etp"))
    _check_expressible(ctx)
    check_mesh_order(ctx)  # AutoTP groups consecutive ranks (tp innermost)
    header = header_lines(ctx, TARGET)
    config = {"_autotune": {"plan": header[0], "target": TARGET}, **_config(ctx)}
    notes = [*header, *_notes(ctx)]
    return ExportResult(format="deepspeed", text=json.dumps(config, indent=2) + "\n", suffix=".json",
                        notes=tuple(notes), notes_in_text=False)
