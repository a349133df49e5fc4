"""One rank's training step for a plan: the parallelised model chunks, optimizer and schedule.

Without pipeline parallelism a step accumulates gradients over the plan's micro-batches
(DDP's ``no_sync`` / FSDP's ``set_requires_gradient_sync`` until the last); with it the
``torch.distributed.pipelining`` schedule (GPipe, 1F1B or interleaved 1F1B) runs them.
Every micro-batch loss is divided by the number of micro-batches, so the gradient is that
of the mean loss over the global batch, as in the single-process reference.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from autotune.errors import require
from autotune.validate.job import LEARNING_RATE, RunConfig
from autotune.validate.model import build_model
from autotune.validate.moe_model import expert_parameters, shard_experts
from autotune.validate.parallelize import (apply_data_parallel, apply_recompute, apply_tensor_parallel, carve_chunk,
                                           expert_groups, half_dtype, pipeline_chunks)

__all__ = ["Trainer", "build_trainer", "check_runnable", "step_batch", "run_device"]


def run_device(config: RunConfig) -> torch.device:
    """The worker's device: the CPU under gloo, its current GPU under NCCL."""
    return torch.device("cuda", torch.cuda.current_device()) if config.backend == "nccl" else torch.device("cpu")


def check_runnable(config: RunConfig) -> None:
    """Reject plans the reference runner cannot execute, naming the field."""
    plan = config.plan
    first = plan.stages[0]
    for stage in plan.stages:
        require(stage.cp == 1, "cp", "context parallelism is not in the reference runner; use cp 1")
        require(stage.tp == first.tp, "tp", f"every stage needs the same tp to run, got {[s.tp for s in plan.stages]}")
        require(stage.sequence_parallel == first.sequence_parallel, "sequence_parallel",
                "every stage needs the same sequence_parallel to run")
        for name in ("weights_in", "optimizer_in", "activations_in"):
            require(getattr(stage, name) == "hbm", name, "offloading is not in the reference runner; use 'hbm'")
        require(stage.ep == first.ep and stage.etp == 1, "ep", "every stage needs the same ep, and etp 1, to run")
        require(not config.model.is_moe or stage.tp == 1, "tp", "the reference runner's MoE layers have no "
                "tensor-parallel plan; use tp 1")
        if stage.ep > 1:
            require(stage.zero == 0, "zero", "expert parallelism runs in the reference runner with zero 0 "
                    "(DDP beside expert-parallel weights)")


def step_batch(config: RunConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of the whole global batch at ``step``: the same on every rank."""
    m, w = config.model, config.workload
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    if m.has_embeddings:
        tokens = torch.randint(0, m.vocab_size, (w.global_batch, w.seq_len + 1), generator=gen)
        return tokens[:, :-1], tokens[:, 1:]
    shape = (w.global_batch, w.seq_len, m.hidden_size)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if target.dtype == torch.long:
        return F.cross_entropy(output.flatten(0, 1).float(), target.flatten())
    return F.mse_loss(output.float(), target)


@dataclass
class Trainer:
    """The modules, optimizer and (optional) pipeline schedule of one rank."""

    config: RunConfig
    modules: list[nn.Module]
    optimizer: torch.optim.Optimizer
    dp_rank: int
    dp_group: object
    schedule: object = None
    first_stage: bool = True
    tp_enabled: bool = False
    autocast_dtype: torch.dtype | None = None
    sync_grads: bool = True
    tied: tuple | None = None  # (process group, parameter) of an embedding tied across stages
    experts: tuple | None = None  # (expert-DP group, expert parameters, dp) under expert parallelism

    def set_dropout(self, on: bool) -> None:
        for module in self.modules:
            module.train(on)

    def _local_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = step_batch(self.config, step)
        per = self.config.plan.micro_batch * self.config.plan.num_microbatches
        rows = slice(self.dp_rank * per, (self.dp_rank + 1) * per)
        device = run_device(self.config)
        return inputs[rows].to(device), targets[rows].to(device)

    def _contexts(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        if self.tp_enabled:
            from torch.distributed.tensor.parallel import loss_parallel
            stack.enter_context(loss_parallel())
        if self.autocast_dtype is not None:
            stack.enter_context(torch.autocast(run_device(self.config).type, dtype=self.autocast_dtype))
        return stack

    def step(self, data_step: int) -> torch.Tensor | None:
        """One optimizer step on the data of ``data_step``; returns this rank's mean loss
        (None off the last stage)."""
        inputs, targets = self._local_batch(data_step)
        with self._contexts():
            loss = self._pipeline_step(inputs, targets) if self.schedule else self._accumulate(inputs, targets)
        if self.tied is not None:
            _sum_tied_gradient(*self.tied)
        if self.experts is not None and self.sync_grads:
            _sync_expert_gradients(*self.experts)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def _pipeline_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        losses: list[torch.Tensor] = []
        self.schedule.step(*((inputs,) if self.first_stage else ()), target=targets, losses=losses)
        return torch.stack([_local(x).detach() for x in losses]).mean() if losses else None

    def _accumulate(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        (model,) = self.modules
        count = self.config.plan.num_microbatches
        total = torch.zeros((), device=inputs.device)
        for i, (x, y) in enumerate(zip(inputs.chunk(count), targets.chunk(count))):
            sync = i == count - 1 and self.sync_grads
            if hasattr(model, "set_requires_gradient_sync"):  # FSDP2 / replicate
                model.set_requires_gradient_sync(sync)
            with contextlib.nullcontext() if sync or not hasattr(model, "no_sync") else model.no_sync():
                loss = _loss(model(x), y) / count
                loss.backward()
            total += _local(loss).detach()
        return total


def _sync_expert_gradients(group: object, params: list, dp: int) -> None:
    """Each expert's owner holds the gradient from the tokens of its EP group; summing over
    the expert-DP group covers all dp replicas, and 1/dp makes it the mean loss's gradient,
    as DDP's average does for the other parameters (Megatron-Core's expert-DP reduction)."""
    for param in params:
        if param.grad is not None:
            dist.all_reduce(param.grad, group=group)
            param.grad.div_(dp)


def _sum_tied_gradient(group: object, param: torch.Tensor) -> None:
    """The input embedding and the output layer share one matrix held by the first and the
    last stage: each adds the other's gradient (Megatron-LM's embedding group, Shoeybi et
    al. 2019 sec. 3), so both apply the same update."""
    grad = param.grad
    if hasattr(grad, "to_local"):
        if grad.placements != param.placements:  # an embedding's backward leaves its gradient replicated
            grad = param.grad = grad.redistribute(grad.device_mesh, param.placements)
        grad = grad.to_local()
    dist.all_reduce(grad, group=group)


def _tied_pair(mesh: object, modules: list[nn.Module], chunks: list) -> tuple | None:
    """The group of this rank and its peer holding the other end of a tied embedding."""
    if mesh["pp"].size() == 1:
        return None
    grid = mesh.mesh
    firsts, lasts = grid[0].flatten().tolist(), grid[-1].flatten().tolist()
    mine = None
    for pair in zip(firsts, lasts):  # every rank creates every group, in the same order
        group = dist.new_group(ranks=list(pair))
        if dist.get_rank() in pair:
            mine = group
    for module, chunk in zip(modules, chunks):
        wanted = "tok_embeddings.weight" if chunk.index == 0 else "output.weight" if chunk.index == chunk.count - 1 else None
        for name, param in module.named_parameters():
            if wanted and name.endswith(wanted):
                return mine, param
    return None


def _local(x: torch.Tensor) -> torch.Tensor:
    return x.full_tensor() if hasattr(x, "full_tensor") else x


def _mesh(config: RunConfig):
    """(pp, dp, tp) mesh; the plan's mesh order decides whether TP or DP ranks are adjacent."""
    from torch.distributed.device_mesh import init_device_mesh
    plan = config.plan
    device = "cuda" if config.backend == "nccl" else "cpu"
    tp, dp = plan.stages[0].tp, plan.dp
    if plan.stages[0].mesh_order.index("tp") < plan.stages[0].mesh_order.index("dp"):
        return init_device_mesh(device, (plan.pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    return init_device_mesh(device, (plan.pp, tp, dp), mesh_dim_names=("pp", "tp", "dp"))


def _optimizer(params: list, zero_one: bool, dp_group: object) -> torch.optim.Optimizer:
    # Fused AdamW: one pass over the states without foreach temporaries, like Megatron's fused Adam.
    if zero_one:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=dp_group,
                                       lr=LEARNING_RATE, fused=True)
    return torch.optim.AdamW(params, lr=LEARNING_RATE, fused=True)


def _schedule(config: RunConfig, modules: list[nn.Module], chunks: list, pp_group: object) -> object:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
    device = run_device(config)
    stages = [PipelineStage(m, c.index, c.count, device, group=pp_group) for m, c in zip(modules, chunks)]
    n = config.plan.num_microbatches
    if config.plan.schedule == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches=n, loss_fn=_loss)
    cls = ScheduleGPipe if config.plan.schedule == "gpipe" else Schedule1F1B
    return cls(stages[0], n_microbatches=n, loss_fn=_loss)


def _expert_parallel(full: nn.Module, mesh, ep: int) -> tuple:
    """Keep this rank's experts of ``full``: (expert-DP group, True), or (None, False) without
    expert parallelism."""
    if ep <= 1:
        return None, False
    ep_group, ep_rank, edp_group = expert_groups(mesh, ep)
    shard_experts(full, ep_group, ep_rank, ep)
    return edp_group, True


def _expert_names(module: nn.Module) -> tuple[str, ...]:
    """Names of the routed experts' weights, as the (possibly wrapped) module calls them now."""
    return tuple(n for n, _ in module.named_parameters() if n.split(".")[-1].startswith("experts_"))


def _chunk_modules(config: RunConfig, full: nn.Module, chunks: list, mesh, stage, experts_apart: bool) -> list[nn.Module]:
    """Each chunk carved, tensor-parallel, recomputed and wrapped for data parallelism; with
    expert parallelism DDP leaves the experts (named after recomputation's wrapping) alone."""
    plan, half = config.plan, half_dtype(config.workload.dtype)
    modules = []
    for chunk in chunks:
        part = carve_chunk(full, chunk) if plan.pp > 1 else full
        if stage.tp > 1:
            apply_tensor_parallel(part, mesh["tp"], sequence_parallel=stage.sequence_parallel)
        apply_recompute(part, stage.recompute)
        if plan.dp > 1:
            part = apply_data_parallel(part, mesh["dp"], zero=stage.zero, bucket_bytes=config.bucket_bytes, tp=stage.tp,
                                       compute_dtype=half, ignore=_expert_names(part) if experts_apart else ())
        modules.append(part)
    return modules


def build_trainer(config: RunConfig) -> Trainer:
    """Build this rank's part of the plan (the process group must be initialised)."""
    check_runnable(config)
    plan, spec = config.plan, config.model
    mesh = _mesh(config)
    pp_rank, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    stage = plan.stages[pp_rank]
    # Built and initialised on the rank's device from the seed (the same numbers on every rank: one device type).
    full = build_model(spec, attention_impl=config.workload.attention_impl, seed=config.seed, device=run_device(config))
    edp_group, experts_apart = _expert_parallel(full, mesh, stage.ep)  # experts: the expert-DP reduction
    chunks = pipeline_chunks(plan, pp_rank)
    modules = _chunk_modules(config, full, chunks, mesh, stage, experts_apart)
    del full
    params = [p for module in modules for p in module.parameters()]
    experts = (edp_group, [p for m in modules for p in expert_parameters(m)], plan.dp) if experts_apart else None
    dp_group = mesh["dp"].get_group()
    optimizer = _optimizer(params, stage.zero == 1 and plan.dp > 1, dp_group)
    fsdp = plan.dp > 1 and (stage.zero >= 2 or stage.tp > 1)
    tied = _tied_pair(mesh, modules, chunks) if spec.tied_embeddings and spec.has_embeddings else None
    return Trainer(config=config, modules=modules, optimizer=optimizer, dp_rank=dp_rank, dp_group=dp_group,
                   schedule=_schedule(config, modules, chunks, mesh["pp"].get_group()) if plan.pp > 1 else None,
                   first_stage=chunks[0].index == 0, tp_enabled=stage.tp > 1 and spec.has_embeddings,
                   autocast_dtype=None if fsdp else half_dtype(config.workload.dtype),
                   sync_grads=config.fault != "skip_grad_sync", tied=tied, experts=experts)
