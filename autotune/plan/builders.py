"""Plans built from Megatron-style degrees (what ``autotune evaluate`` and baselines use)."""

from __future__ import annotations

from autotune.errors import require, require_positive
from autotune.plan.plan import Plan, StagePlan

__all__ = ["split_layers", "uniform_plan"]


def split_layers(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Layer ranges of ``pp`` stages as even as possible (earlier stages take the remainder)."""
    require(pp <= num_layers, "pp", f"pp={pp} exceeds the {num_layers} layers; use pp <= {num_layers}")
    base, extra = divmod(num_layers, pp)
    ranges, first = [], 0
    for i in range(pp):
        count = base + (1 if i < extra else 0)
        ranges.append((first, first + count))
        first += count
    return ranges


def uniform_plan(*, num_layers: int, gpus: int, tp: int = 1, pp: int = 1, dp: int | None = None, cp: int = 1,
                 vpp: int = 1, micro_batch: int = 1, global_batch: int, sequence_parallel: bool = False,
                 recompute: str = "none", zero: int = 0, mesh_order: str = "tp-cp-dp",
                 overlap_grad_reduce: bool = True, overlap_param_gather: bool = True,
                 overlap_tp_comm: bool = False, overlap_tp_backward: bool = True, overlap_p2p_comm: bool = True,
                 schedule: str | None = None,
                 has_embeddings: bool = True, **stage_options: object) -> Plan:
    """Equal stages with the same degrees everywhere, as Megatron-LM runs them. ``schedule``
    defaults to interleaved when ``vpp > 1``, else 1F1B; GPipe is the other choice."""
    for name, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("cp", cp), ("vpp", vpp),
                        ("micro_batch", micro_batch), ("global_batch", global_batch)):
        require_positive(name, value)
    if dp is None:
        require(gpus % (tp * pp * cp) == 0, "gpus",
                f"tp x pp x cp = {tp * pp * cp} does not divide {gpus} GPUs")
        dp = gpus // (tp * pp * cp)
    require_positive("dp", dp)
    require(tp * pp * dp * cp == gpus, "gpus",
            f"tp x pp x dp x cp = {tp}x{pp}x{dp}x{cp} = {tp * pp * dp * cp} must equal --gpus {gpus}")
    require(global_batch % dp == 0, "global_batch",
            f"global batch {global_batch} must divide among dp={dp} replicas")
    per_replica = global_batch // dp
    require(per_replica % micro_batch == 0, "micro_batch",
            f"micro-batch {micro_batch} must divide the per-replica batch {per_replica} "
            f"(global batch {global_batch} / dp {dp}); valid: "
            + ", ".join(str(d) for d in range(1, min(per_replica, 64) + 1) if per_replica % d == 0))
    require(vpp == 1 or num_layers % (pp * vpp) == 0, "vpp",
            f"{num_layers} layers do not split into pp={pp} x vpp={vpp} equal chunks")
    stages = tuple(
        StagePlan(layers=layers, has_embedding=(i == 0 and has_embeddings), has_head=(i == pp - 1 and has_embeddings),
                  num_gpus=tp * cp * dp, tp=tp, cp=cp, dp=dp, sequence_parallel=sequence_parallel and tp > 1,
                  recompute=recompute, zero=zero, mesh_order=mesh_order, **stage_options)
        for i, layers in enumerate(split_layers(num_layers, pp)))
    return Plan(gpus=gpus, micro_batch=micro_batch, num_microbatches=per_replica // micro_batch,
                stages=stages, schedule=schedule or ("interleaved" if vpp > 1 else "1f1b"), vpp=vpp,
                overlap_grad_reduce=overlap_grad_reduce, overlap_param_gather=overlap_param_gather,
                overlap_tp_comm=overlap_tp_comm, overlap_tp_backward=overlap_tp_backward,
                overlap_p2p_comm=overlap_p2p_comm)
