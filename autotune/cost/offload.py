"""Tensor classes in host DRAM or CXL memory: transfer time, overlap with compute, capacity.

A class placed off HBM (``weights_in``, ``gradients_in``, ``optimizer_in``, ``activations_in``,
``kv_cache_in`` of a StagePlan) lives in the tier and crosses the link when a layer needs it:
host memory over PCIe (``cluster.host_link``), CXL memory over ``cluster.cxl_link``. A transfer
of n bytes takes ``link latency + tier latency + n / min(link, tier bandwidth)``; every class
crosses the GPU's one PCIe link, so a layer's transfers add up. Layer-wise streaming moves the
next layer's data while the current one computes (reads ahead, writes behind), across
micro-batch boundaries too, so per micro-batch only what compute cannot cover is exposed, plus
the first transfer once per B micro-batches (ZeRO-Offload, Ren et al. 2021 sec. 4; ZeRO-Infinity,
Rajbhandari et al. 2021 sec. 6; FlexGen, Sheng et al. 2023 sec. 4):

    exposed = (n - 1) * max(0, t - c) + max(t / B, t - c)
              for n layers, transfer t and compute c per layer, B micro-batches

With the optimizer off the GPU the step ends as ZeRO-Offload's does (not overlapped: the
conservative case without its delayed parameter update): gradients down, the Adam step on the
CPU (bound by the tier's bandwidth), the updated 16-bit weights back up.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.cost.memory import StageMemory
from autotune.errors import AutotuneError
from autotune.plan.plan import StagePlan
from autotune.spec.hardware import ClusterSpec, LinkLevel, MemoryTier

__all__ = ["OFF_HBM", "tier_path", "transfer_s", "streamed_exposed_s", "offloads", "offload_memory",
           "tier_overflow", "training_offload", "inference_offload", "check_training_placement", "CPU_ADAM_BYTES_PER_PARAM",
           "layer_offload"]

OFF_HBM = ("host", "cxl")
# CPU Adam step (DeepSpeed's CPU-Adam, Ren et al. 2021 sec. 5.1), bytes per parameter in the
# tier's memory: the fp32 gradient read twice (global-norm clip, step) 8, fp32 master, m and v
# read and written 24, and in mixed precision the 16-bit weight copy written 2.
CPU_ADAM_BYTES_PER_PARAM = {"fp32": 32.0, "bf16": 34.0, "fp16": 34.0, "fp8": 34.0, "fp8_rowwise": 34.0, "mxfp8": 34.0, "nvfp4": 34.0}


def tier_path(cluster: ClusterSpec, placement: str) -> tuple[LinkLevel, MemoryTier]:
    """The link to ``placement``'s memory and the memory tier itself."""
    device = cluster.device
    if placement == "host":
        return cluster.host_link, device.tier("host")
    if placement == "cxl":
        if cluster.cxl_link is None or not device.has_tier("cxl"):
            raise AutotuneError("placement", f"cluster {cluster.name} has no CXL memory (a cxl_link and a 'cxl' tier); "
                                f"use hbm or host, or a cluster such as dgx-h100-cxl")
        return cluster.cxl_link, device.tier("cxl")
    raise AutotuneError("placement", f"{placement!r} is not an off-HBM tier; choose one of: {', '.join(OFF_HBM)}")


def transfer_s(cluster: ClusterSpec, placement: str, nbytes: object) -> object:
    """One transfer between HBM and the tier: latencies plus bytes over the slower of link and tier."""
    link, tier = tier_path(cluster, placement)
    bandwidth = min(link.bandwidth_bytes_per_s, tier.bandwidth_bytes_per_s)
    return np.where(np.asarray(nbytes) > 0, link.latency_s + tier.latency_s + np.asarray(nbytes) / bandwidth, 0.0)


def streamed_exposed_s(transfer_per_layer_s: object, compute_per_layer_s: object, num_layers: object,
                       num_microbatches: object = 1) -> object:
    """Exposed seconds per micro-batch of layer-wise streaming (module docstring)."""
    n = np.asarray(num_layers, dtype=float)
    t = np.asarray(transfer_per_layer_s, dtype=float)
    slack = t - np.asarray(compute_per_layer_s)
    first = np.maximum(t / np.asarray(num_microbatches, dtype=float), slack)
    return np.where(n > 0, (n - 1.0) * np.maximum(0.0, slack) + first, 0.0)


def offloads(stage: StagePlan) -> bool:
    return any(getattr(stage, name) != "hbm" for name in
               ("weights_in", "gradients_in", "optimizer_in", "activations_in", "kv_cache_in"))


def offload_memory(memory: StageMemory, moved: dict[str, tuple[str, object, object]]) -> StageMemory:
    """``memory`` with classes moved off HBM: ``{field: (placement, bytes left in HBM, bytes moved)}``."""
    changes: dict[str, object] = {}
    host, cxl = memory.host_bytes, memory.cxl_bytes
    for field, (placement, left, moved_bytes) in moved.items():
        changes[field] = left
        if placement == "host":
            host = host + moved_bytes
        else:
            cxl = cxl + moved_bytes
    return replace(memory, **changes, host_bytes=host, cxl_bytes=cxl, offloaded_bytes=host + cxl)


def tier_overflow(memory: StageMemory, cluster: ClusterSpec) -> str:
    """Why the offloaded bytes do not fit their tiers ("" when they do)."""
    for name, used in (("host", memory.host_bytes), ("cxl", memory.cxl_bytes)):
        most = used if type(used) is float else float(np.max(used))  # a float as it is (a plan's stage: np.max costs more)
        if most > 0:
            capacity = tier_path(cluster, name)[1].capacity_bytes
            if most > capacity:
                return (f"{most / 2**30:.1f} GiB offloaded to {name} memory per GPU but "
                        f"{cluster.name} has {capacity / 2**30:.1f} GiB of it per GPU")
    return ""


def _per_step_optimizer_s(ctx: object, stage: StagePlan, params_local: object) -> object:
    """Gradients down (unless already there), the CPU Adam step in the tier's memory, 16-bit
    weights up (unless they live there too)."""
    dtype, act_bytes, where = ctx.workload.dtype, ctx.tables.act_bytes, stage.optimizer_in
    tier = tier_path(ctx.cluster, where)[1]
    down = transfer_s(ctx.cluster, where, params_local * act_bytes) if stage.gradients_in == "hbm" else 0.0
    adam = params_local * CPU_ADAM_BYTES_PER_PARAM[dtype] / tier.bandwidth_bytes_per_s
    up = transfer_s(ctx.cluster, where, params_local * act_bytes) if stage.weights_in == "hbm" else 0.0
    return down + adam + up


def check_training_placement(stage: StagePlan) -> None:
    """Placements a training stage can run."""
    if stage.kv_cache_in != "hbm":
        raise AutotuneError("kv_cache_in", "training keeps no KV cache; leave it at hbm")
    if stage.weights_in != "hbm" and stage.optimizer_in != stage.weights_in:
        raise AutotuneError("weights_in", f"weights in {stage.weights_in} memory are updated there: set "
                            f"optimizer_in={stage.weights_in!r} too (ZeRO-Offload's CPU optimizer)")


def training_offload(ctx: object, stage: StagePlan, time: object, memory: StageMemory, *, saved_bytes: object,
                     fwd_s: object, bwd_s: object, params: object, num_layers: object) -> tuple:
    """(StageTime, StageMemory) of a training stage with its tensor classes placed off HBM.

    Forward: weights in, saved activations out; backward: weights in, activations back, this
    micro-batch's gradients out. All cross the GPU's one PCIe link, so per layer they add up.
    """
    check_training_placement(stage)
    n = np.maximum(np.asarray(num_layers, dtype=float), 1.0)
    cl, act_bytes = ctx.cluster, ctx.tables.act_bytes
    fwd_t = bwd_t = 0.0
    moved = {}
    if stage.weights_in != "hbm":
        per_layer = transfer_s(cl, stage.weights_in, memory.weights_bytes / n)
        fwd_t, bwd_t = fwd_t + per_layer, bwd_t + per_layer
        moved["weights_bytes"] = (stage.weights_in, 2.0 * memory.weights_bytes / n, memory.weights_bytes)
    if stage.activations_in != "hbm":
        per_layer = transfer_s(cl, stage.activations_in, saved_bytes / n)
        fwd_t, bwd_t = fwd_t + per_layer, bwd_t + per_layer
        moved["activations_bytes"] = (stage.activations_in, 2.0 * saved_bytes / n, memory.activations_bytes)
    if stage.gradients_in != "hbm":
        bwd_t = bwd_t + transfer_s(cl, stage.gradients_in, params * act_bytes / n)
        moved["gradients_bytes"] = (stage.gradients_in, 2.0 * params * act_bytes / n, memory.gradients_bytes)
    b = ctx.num_microbatches
    exposed = streamed_exposed_s(fwd_t, fwd_s / n, n, b) + streamed_exposed_s(bwd_t, bwd_s / n, n, b)
    changes = {"offload_s": time.offload_s + exposed}
    if stage.optimizer_in != "hbm":
        shards = stage.dp * stage.cp if stage.zero >= 1 else 1
        changes["optimizer_s"] = _per_step_optimizer_s(ctx, stage, params / shards)
        moved["optimizer_states_bytes"] = (stage.optimizer_in, 0.0 * memory.optimizer_states_bytes,
                                           memory.optimizer_states_bytes)
    if stage.gradients_in != "hbm" and stage.zero < 2:  # reduced every micro-batch before they leave
        changes["dp_comm_s"] = time.dp_comm_s * ctx.num_microbatches
    return replace(time, **changes), offload_memory(memory, moved)


def inference_offload(cluster: ClusterSpec, stage: StagePlan, time: object, memory: StageMemory, *,
                      layer_compute_s: object, kv_bytes_per_layer: object, num_layers: object,
                      num_microbatches: object) -> tuple:
    """(StageTime, StageMemory) of an inference stage whose weights or KV cache live off HBM:
    per layer the weights come in and the micro-batch's K/V (its offloaded share) go out
    (prefill) or come in (decode), streamed one layer ahead; HBM keeps two layers' worth as
    buffers. The attention kernel then reads the whole cache from HBM as before."""
    n = np.maximum(np.asarray(num_layers, dtype=float), 1.0)
    per_layer, moved = 0.0, {}
    if stage.weights_in != "hbm":
        per_layer = per_layer + transfer_s(cluster, stage.weights_in, memory.weights_bytes / n)
        moved["weights_bytes"] = (stage.weights_in, 2.0 * memory.weights_bytes / n, memory.weights_bytes)
    if stage.kv_cache_in != "hbm":  # kv_cache_in_share of it off HBM (FlexGen's placement percentages)
        share = stage.kv_cache_in_share
        per_layer = per_layer + transfer_s(cluster, stage.kv_cache_in, share * kv_bytes_per_layer)
        left = (1.0 - share) * memory.activations_bytes + 2.0 * share * kv_bytes_per_layer
        moved["activations_bytes"] = (stage.kv_cache_in, left, share * memory.activations_bytes)
    exposed = streamed_exposed_s(per_layer, layer_compute_s, n, num_microbatches)
    return replace(time, offload_s=time.offload_s + exposed), offload_memory(memory, moved)


def layer_offload(ctx: object, stage: StagePlan, time: object, memory: StageMemory, *, layer_saved_bytes: object,
                  fwd_layer_s: object, bwd_layer_s: object, num_layers: object, inflight: object) -> tuple:
    """(StageTime, StageMemory) with the saved activations of the stage's first N layers
    (``activation_offload_layers``) in host memory, as Megatron-Core's cpu_offloading runs it
    through Transformer Engine's AsyncDoubleBufferGroupOffloadHandler (transformer_engine/pytorch/
    cpu_offload.py of TE 2.7-2.9, NeMo 25.09 and 25.11; cpu_offload_v1.py later), which
    megatron/core/transformer/transformer_block.py builds with get_cpu_offload_context and commits
    after every layer. TE >= 2.10's DefaultOffloadSynchronizer keeps one set fewer (L - N) and gives
    each copy L - N layers (not L // N): for those versions this is conservative.

    - what: every tensor a layer saves that carries ``activation_offloading``: TE's saved linear
      inputs (module/linear.py:385, layernorm_linear.py:411 with the norm's input and statistics,
      layernorm_mlp.py:512 @v2.7), fused attention's q, k, v, output and softmax statistics
      (attention/dot_product_attention/backends.py:1082-1083), Megatron's own linear inputs
      (tensor_parallel/layers.py) and SwiGLU input (transformer/mlp.py): here the layer's whole saved
      set per micro-batch (the few unmarked ones, such as dropout masks, are neglected);
    - memory: group i is freed once its copy is done, at layer_window_map[i] = (L // N)(i + 1) - 1,
      and reloaded in backward at that same layer; so besides the L - N kept layers one offloaded
      layer's set is on the GPU at the peak (the last one leaving as the forward ends, the first
      reloaded as the backward begins): N - 1 sets leave HBM, N sit in pinned host memory;
    - time: one d2h copy per offloaded layer in forward, one h2d copy in backward, each on its own
      stream and waited for L // N layers later (the window), so a transfer hides behind L // N
      layers' compute; nothing waits for a first transfer (the first offload starts after layer 0,
      the first reload at the top layer's backward), hence no start-up term (B = inf below).
    """
    n = np.asarray(num_layers, dtype=float)
    k = np.minimum(float(stage.activation_offload_layers), np.maximum(n - 1.0, 0.0))  # < the layers (plan.py)
    window = np.floor(n / np.maximum(k, 1.0))  # layers between a group's copy and its wait
    per_layer = transfer_s(ctx.cluster, "host", layer_saved_bytes)
    exposed = (streamed_exposed_s(per_layer, window * fwd_layer_s, k, np.inf)
               + streamed_exposed_s(per_layer, window * bwd_layer_s, k, np.inf))
    moved = k * layer_saved_bytes * inflight
    left = memory.activations_bytes - np.maximum(k - 1.0, 0.0) * layer_saved_bytes * inflight
    memory = offload_memory(memory, {"activations_bytes": ("host", left, moved)})
    return replace(time, offload_s=time.offload_s + exposed), memory
