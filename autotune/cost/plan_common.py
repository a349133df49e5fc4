"""What the training and the inference estimators share: the plan checks, where each stage
sits in the cluster, a stage's estimate record, and the uncertainty band from the profile."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.cost.compute import block_times, memory_role
from autotune.cost.estimate import StageEstimate
from autotune.cost.pipeline import inflight_microbatches
from autotune.cost.stage import StageCost, StagePosition
from autotune.errors import require
from autotune.graph.table import ModelTables
from autotune.plan.plan import Plan
from autotune.spec.hardware import ClusterSpec, DeviceProfile
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload, gemm_dtype, is_training

__all__ = ["check_plan", "check_runtime_plan", "stage_positions", "stage_estimate", "uncertainty_pct"]


def check_runtime_plan(runtime: Runtime, workload, plan: Plan) -> None:
    """Reject a plan choice the runtime cannot run (a ZeRO stage it lacks, FSDP2's reshard and HSDP
    variants), naming the field and what the runtime offers."""
    if not is_training(workload):
        return
    require(runtime.serving is None, "runtime", f"{runtime.name} is a serving engine: it runs inference workloads "
            "(prefill, decode, serve), not training steps")
    for stage in _distinct(plan.stages, ("zero", "reshard_after_forward", "dp_shard", "dp")):
        require(stage.zero in runtime.zero_stages, "zero", f"runtime {runtime.name} runs ZeRO stage(s) "
                f"{', '.join(map(str, runtime.zero_stages))}, not {stage.zero}")
        variant = (not stage.reshard_after_forward or stage.dp_shard not in (0, stage.dp)) and stage.zero == 3
        require(runtime.reshard_variants or not variant, "reshard_after_forward" if not stage.reshard_after_forward
                else "dp_shard", f"runtime {runtime.name} has no FSDP2 reshard_after_forward=False or HSDP setting; "
                f"give --runtime torchtitan, torch, transformers or meta for them")


def _distinct(stages, names: tuple[str, ...]) -> list:
    """The first stage of each distinct combination of ``names``, in order: the checks read only
    those fields, so the first stage failing one is among them (a deep pipeline repeats a few)."""
    first: dict[tuple, object] = {}
    for stage in stages:
        first.setdefault(tuple(getattr(stage, name) for name in names), stage)
    return list(first.values())


def check_plan(model: ModelSpec, workload: TrainingWorkload, cluster: ClusterSpec, plan: Plan) -> None:
    """Reject plans the model, workload or cluster cannot run, naming the field."""
    cluster.check_gpus(plan.gpus)
    cluster.device.require_dtype(gemm_dtype(workload.dtype))
    plan.check_against(model.num_layers, workload.global_batch, model.has_embeddings)
    for stage in _distinct(plan.stages, ("tp", "cp", "ep", "etp", "sequence_parallel")):
        if model.has_attention:
            require(model.num_heads % stage.tp == 0, "tp",
                    f"tp={stage.tp} must divide the {model.num_heads} attention heads")
            require(model.num_kv_heads % stage.tp == 0, "tp",
                    f"tp={stage.tp} must divide the {model.num_kv_heads} KV heads (GQA)")
        require(model.ffn_hidden_size % stage.tp == 0, "tp",
                f"tp={stage.tp} must divide ffn_hidden_size {model.ffn_hidden_size}")
        require(workload.seq_len % stage.cp == 0, "cp", f"cp={stage.cp} must divide seq_len {workload.seq_len}")
        _check_experts(model, stage, training=is_training(workload))
    require(workload.seq_len <= model.max_seq_len, "seq_len",
            f"{workload.seq_len} exceeds the model's maximum sequence length {model.max_seq_len}")


def _check_experts(model: ModelSpec, stage, training: bool) -> None:
    if not model.is_moe:
        require(stage.ep == 1 and stage.etp == 1, "ep", f"{model.name} has no experts: ep and etp must be 1")
        return
    # Megatron-Core (TransformerConfig) requires it, and the MoE cost assumes each TP rank routes its own tokens
    require(not training or stage.tp == 1 or stage.sequence_parallel, "sequence_parallel",
            f"a mixture of experts with tp={stage.tp} needs sequence parallelism in training")
    require(model.num_experts % stage.ep == 0, "ep", f"ep={stage.ep} must divide the {model.num_experts} experts")
    require(model.expert_ffn_hidden_size % stage.etp == 0, "etp",
            f"etp={stage.etp} must divide the expert width {model.expert_ffn_hidden_size}")


def stage_positions(plan: Plan, gpus_per_node: int) -> list[StagePosition]:
    """In-flight micro-batches, neighbours and p2p link of every stage, stages laid out in order."""
    starts = [0]
    for stage in plan.stages[:-1]:
        starts.append(starts[-1] + stage.num_gpus)
    crosses = [
        starts[i] // gpus_per_node != (starts[i + 1] + plan.stages[i + 1].num_gpus - 1) // gpus_per_node
        for i in range(plan.pp - 1)
    ]
    positions = []
    for i, start in enumerate(starts):
        links = ([crosses[i - 1]] if i > 0 else []) + ([crosses[i]] if i < plan.pp - 1 else [])
        positions.append(StagePosition(
            inflight=inflight_microbatches(i, plan.pp, plan.num_microbatches, plan.schedule, plan.vpp),
            neighbors=len(links), p2p_inter_node=any(links), first_gpu=start))
    return positions


def stage_estimate(index: int, plan: Plan, cost: StageCost, pos: StagePosition, usable: float) -> StageEstimate:
    t = cost.time
    return StageEstimate(
        index=index, layers=plan.stages[index].layers, num_gpus=plan.stages[index].num_gpus,
        microbatch_time_s=t.microbatch_s,
        time_s={"compute_s": t.compute_s, "tp_comm_s": t.tp_comm_s, "cp_comm_s": t.cp_comm_s,
                "p2p_s": t.p2p_s, "zero3_comm_s": t.zero3_comm_s, "offload_s": t.offload_s,
                "dp_comm_s": t.dp_comm_s, "optimizer_s": t.optimizer_s, "ep_comm_s": t.ep_comm_s,
                "host_s": t.host_s},
        memory_bytes=cost.memory.as_dict(), peak_memory_bytes=cost.memory.peak_bytes,
        inflight_microbatches=pos.inflight, fits=cost.memory.peak_bytes <= cost.memory.reserved_bytes + usable,
        fwd_s=float(cost.fwd_s), bwd_s=float(cost.bwd_s),
    )


@lru_cache(maxsize=256)
def _compute_spread(tables: ModelTables, device: DeviceProfile, dtype: str) -> float:
    """Residual RMS of the compute and memory fits, weighted by each class's share of a layer's
    forward+backward kernel time on ``device`` (one micro-batch, no parallelism)."""
    times = block_times(tables.layer, device, dtype, 1, 1, 1, False)
    per_op = np.asarray(times.fwd_ops_s + times.bwd_ops_s, dtype=float).reshape(-1)
    total = float(per_op.sum())
    spread = 0.0
    for kind, name, op_s in zip(tables.layer.kinds, tables.layer.names, per_op):
        fit = device.regression(kind, dtype) if kind in ("gemm", "bmm", "attention") \
            else device.memory_regression(memory_role(kind, name))
        spread += op_s / total * fit.residual_rel_std if total > 0 else 0.0
    return spread


def uncertainty_pct(cluster: ClusterSpec, dtype: str, compute_share: float, comm_share: float,
                     tables: ModelTables | None = None) -> float:
    """A +-% band: each share of the step carries the relative residual spread (RMS) of the
    fits that price it: the compute and memory regressions of the step's dtype, and the
    measured collectives (the formulas' links have none; they borrow the compute spread).
    A fit's residuals are mostly systematic (shape-dependent efficiency), so they do not cancel
    over a step's many kernels: with the model's ``tables`` each class's spread is weighted by
    its share of the kernel time; without them the largest spread is taken."""
    device = cluster.device
    used = [device.regression(op_class, dtype) for op_class in ("gemm", "bmm", "attention")]
    memory = [device.memory, *device.memory_kernels.values()]
    largest = max(r.residual_rel_std for r in used + memory)
    compute_std = largest if tables is None else _compute_spread(tables, device, dtype)
    comm_std = max([r.residual_rel_std for link in (cluster.intra_node, cluster.inter_node)
                    for r in link.collectives.values()] + [0.0])
    return 100.0 * (compute_share * compute_std + comm_share * max(comm_std, compute_std))
