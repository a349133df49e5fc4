"""Apply a plan's parallelism to the reference model with torch's own facilities.

One plain function per technique, applied in torchtitan's order (tensor parallel, activation
recomputation, then data parallel / FSDP on each pipeline chunk):

* tensor parallel with sequence parallelism: DTensor ``parallelize_module`` with
  ``ColwiseParallel``/``RowwiseParallel``/``SequenceParallel`` and a vocab-parallel loss
  (``loss_parallel``), Megatron-LM's layout (Shoeybi et al. 2019; Korthikanti et al. 2022);
* recomputation: ``checkpoint_wrapper`` around each block ("full") or ``torch.utils.checkpoint``
  around the s x s attention core ("selective");
* data parallel: ``DistributedDataParallel`` with the plan's bucket (ZeRO-0), with
  ``ZeroRedundancyOptimizer`` (ZeRO-1), ``fully_shard`` without (ZeRO-2) or with (ZeRO-3)
  resharding after forward; with tensor parallelism, DDP cannot hold DTensor parameters, so
  ZeRO-0 uses ``replicate`` (FSDP2's replicated data parallelism);
* pipeline parallel: :func:`pipeline_chunks` says which layers each virtual stage holds and
  :func:`carve_chunk` deletes the rest, as torchtitan's pipeline split does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from autotune.errors import AutotuneError
from autotune.plan.plan import Plan

__all__ = ["Chunk", "pipeline_chunks", "carve_chunk", "apply_tensor_parallel", "apply_recompute",
           "apply_data_parallel", "half_dtype", "expert_groups"]


@dataclass(frozen=True)
class Chunk:
    """Virtual pipeline stage ``index`` (of ``count``): layers ``[first, end)``."""

    index: int
    count: int
    first: int
    end: int
    has_embedding: bool
    has_head: bool


def pipeline_chunks(plan: Plan, pp_rank: int) -> list[Chunk]:
    """The chunks pipeline rank ``pp_rank`` holds: one, or ``vpp`` for the interleaved schedule.

    Interleaving follows Megatron-LM (Narayanan et al. SC'21 sec. 2.2): virtual stage
    ``k * pp + r`` is chunk ``k`` of rank ``r``, and layers are dealt to virtual stages in
    that order, each rank's stage split into ``vpp`` equal chunks.
    """
    pp, vpp = plan.pp, plan.vpp
    sizes = [plan.stages[v % pp].num_layers // vpp for v in range(pp * vpp)]
    first_layer = plan.stages[0].layers[0]
    chunks, start = [], first_layer
    for v, size in enumerate(sizes):
        chunks.append(Chunk(index=v, count=pp * vpp, first=start, end=start + size,
                            has_embedding=v == 0 and plan.stages[0].has_embedding,
                            has_head=v == pp * vpp - 1 and plan.stages[-1].has_head))
        start += size
    return [c for c in chunks if c.index % pp == pp_rank]


def carve_chunk(model: nn.Module, chunk: Chunk) -> nn.Module:
    """A copy of ``model`` holding only ``chunk``'s layers, embedding and head."""
    part = copy.deepcopy(model)
    for name in list(part.layers.keys()):
        if not chunk.first <= int(name) < chunk.end:
            del part.layers[name]
    if not chunk.has_embedding:
        part.tok_embeddings = part.pos_embeddings = None
    if not chunk.has_head:
        part.norm = part.output = None
    return part


def _block_tp_plan(sequence_parallel: bool, gated: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    between = Shard(1) if sequence_parallel else Replicate()  # layout of the residual stream
    plan = {
        "attention": PrepareModuleInput(input_layouts=(between, None), desired_input_layouts=(Replicate(), None)),
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=between),
        "feed_forward": PrepareModuleInput(input_layouts=(between,), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=between),
    }
    if gated:
        plan["feed_forward.w3"] = ColwiseParallel()
    if sequence_parallel:
        plan["attention_norm"] = SequenceParallel()
        plan["ffn_norm"] = SequenceParallel()
    return plan


def _ffn_only_tp_plan() -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()}


def apply_tensor_parallel(model: nn.Module, tp_mesh, *, sequence_parallel: bool) -> None:
    """Megatron-style TP on a (chunk of the) model; the head's logits stay vocab-sharded."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    spec = model.spec
    if not spec.has_attention:  # the seed's FFN-only blocks: no norms for sequence parallelism
        for block in model.layers.values():
            parallelize_module(block, tp_mesh, _ffn_only_tp_plan())
        return
    between = Shard(1) if sequence_parallel else Replicate()
    learned = model.pos_embeddings is not None
    top: dict = {}
    if model.tok_embeddings is not None:
        # Learned positions are added to the whole sequence, so the embedding output stays
        # replicated and the first block takes its sequence shard (a local slice, no traffic).
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(),
                                                output_layouts=Replicate() if learned else between)
        if learned and sequence_parallel:
            first = next(iter(model.layers))
            top[f"layers.{first}"] = PrepareModuleInput(input_layouts=(Replicate(), None),
                                                        desired_input_layouts=(Shard(1), None),
                                                        use_local_output=True)
    if model.output is not None:
        top["norm"] = SequenceParallel() if sequence_parallel else None
        top["output"] = ColwiseParallel(input_layouts=between, output_layouts=Shard(-1), use_local_output=False)
    parallelize_module(model, tp_mesh, {k: v for k, v in top.items() if v is not None})
    gated = spec.ffn_activation == "swiglu"
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, _block_tp_plan(sequence_parallel, gated))
    if spec.tied_embeddings and model.tok_embeddings is not None and model.output is not None:
        model.output.weight = model.tok_embeddings.weight  # both are vocab-sharded: Shard(0)
    _replicate_rest(model, tp_mesh)


def _replicate_rest(model: nn.Module, tp_mesh) -> None:
    """Parameters no TP style covers (learned positions; norms without sequence parallelism)
    become replicated DTensors, as every parameter must be for one optimizer over them all;
    their modules still take and return plain tensors."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    def to_dtensor(module: nn.Module, inputs: tuple, mesh) -> tuple:
        return tuple(x if isinstance(x, DTensor) else DTensor.from_local(x, mesh, [Replicate()]) for x in inputs)

    def to_local(module: nn.Module, output: torch.Tensor, mesh) -> torch.Tensor:
        return output.to_local()

    for module in list(model.modules()):
        direct = list(module.parameters(recurse=False))
        if direct and not any(isinstance(p, DTensor) for p in direct):
            distribute_module(module, tp_mesh, input_fn=to_dtensor, output_fn=to_local)


def apply_recompute(model: nn.Module, mode: str) -> None:
    """Full: every block recomputed in backward; selective: only the attention core."""
    if mode == "full":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        for name in list(model.layers.keys()):
            model.layers[name] = checkpoint_wrapper(model.layers[name])
    elif mode == "selective":
        for block in model.layers.values():
            if getattr(block, "has_attention", False):
                block.attention.recompute_core = True


def half_dtype(dtype: str) -> torch.dtype | None:
    """The 16-bit compute dtype of a mixed-precision workload (None for fp32)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)


def expert_groups(mesh, ep: int) -> tuple:
    """(EP group, rank in it, expert-DP group) of this rank: each data-parallel group of the
    (pp, dp, tp=1) mesh splits into consecutive EP groups of ``ep`` ranks, and ranks at the same
    place in them form the expert data-parallel groups (Megatron-Core's expert rank order,
    tp-ep-dp). Every rank creates every group, in the same order."""
    import torch.distributed as dist

    grid = mesh.mesh.movedim(mesh.mesh_dim_names.index("dp"), -1)
    rows = grid.reshape(-1, grid.shape[-1]).tolist()
    me, mine = dist.get_rank(), (None, 0, None)
    for row in rows:
        ep_sets = [row[i:i + ep] for i in range(0, len(row), ep)]
        edp_sets = [row[j::ep] for j in range(ep)]
        ep_made = [dist.new_group(ranks=r) for r in ep_sets]
        edp_made = [dist.new_group(ranks=r) for r in edp_sets]
        if me in row:
            i = row.index(me)
            mine = (ep_made[i // ep], i % ep, edp_made[i % ep])
    return mine


def apply_data_parallel(model: nn.Module, dp_mesh, *, zero: int, bucket_bytes: float, tp: int,
                        compute_dtype: torch.dtype | None, ignore: tuple[str, ...] = ()) -> nn.Module:
    """Wrap a chunk for data parallelism over ``dp_mesh``; returns the module to run.
    ``ignore``: parameters DDP leaves alone (expert-parallel weights, synchronised over edp)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32 if compute_dtype else None)
    if zero >= 2:
        for block in model.layers.values():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=zero == 3, mp_policy=policy)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=zero == 3, mp_policy=policy)
        return model
    if tp > 1:
        if zero == 1:
            raise AutotuneError("zero", "ZeRO-1 with tensor parallelism is not in the reference runner "
                                "(ZeroRedundancyOptimizer cannot hold DTensor parameters); use zero 0, 2 or 3")
        from torch.distributed._composable.replicate_with_fsdp import replicate
        for block in model.layers.values():
            replicate(block, mesh=dp_mesh, mp_policy=policy)
        replicate(model, mesh=dp_mesh, mp_policy=policy)
        return model
    from torch.nn.parallel import DistributedDataParallel
    if ignore:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, list(ignore))
    # Gradients as views into the buckets: one gradient copy, like Megatron's contiguous grad buffer.
    return DistributedDataParallel(model, process_group=dp_mesh.get_group(), bucket_cap_mb=bucket_bytes / 2**20,
                                   gradient_as_bucket_view=True)
