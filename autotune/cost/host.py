"""Host dispatch: the CPU issuing an eager PyTorch step's kernels, and when the GPU waits for it.

In eager PyTorch the host runs Python, the module code and the ATen dispatcher for every
operator and launches its kernel; the GPU executes them from a queue. The host normally runs
ahead and its time is hidden. It shows (a) where a layer's operators take the host longer to
issue than the GPU to run (small hidden sizes, fast GPUs, slow host cores): the pass takes
max(GPU, host); and (b) after a host-device synchronisation, which empties the queue:
Megatron-Core's MoE dispatchers wait on the host for the token counts every MoE layer forward
(token_dispatcher.py: ``d2h_event.synchronize()`` in the alltoall dispatcher; fused_a2a.py: the
flex/DeepEP dispatch returns the received counts as a host list), so the host cannot run ahead
across MoE layers: each MoE layer forward takes max(host, GPU + one operator's issue time).
CUDA graphs replay a captured scope with one launch, removing that scope's host time
(Megatron ``--cuda-graph-impl``/``--cuda-graph-scope``; the NeMo MoE performance recipes capture
attn, moe_router and moe_preprocess; NVIDIA's Megatron Core MoE report, arXiv 2603.07685, names
host-boundedness a main cost of fine-grained MoE training).

Host time = operators x seconds per operator. Operators per layer pass are Megatron-Core's own,
counted per CUDA-graph scope (profilers/host_ops.py); seconds per operator come from a published
per-``nn.Linear`` host time on the GPU server's CPU, carried to an operator of a layer by the
ratio measured beside it. Not modelled: embedding, loss and optimizer operators; context-parallel
ring steps; Transformer Engine's fused modules (fewer kernels, more Python each; assumed to cost
the host what the local spec's operators do); the per-expert GEMMs a grouped GEMM issues from C++.
"""

from __future__ import annotations

import numpy as np

__all__ = ["host_cpu", "op_host_s", "layer_host_s", "exposed_host_s", "layers_host_s", "layer_fwd_ops", "MLA_EXTRA_FWD_OPS"]

# Host seconds of one nn.Linear forward (BF16, hidden 2048, 8192 tokens) measured on the CPU side:
# 13.48 us on a DGX H100 (Intel Xeon Platinum 8480C), 37.08 us on GB200 (Grace, Neoverse V2)
# (TransformerEngine issue #2053, "High CPU overhead on Grace systems", 2025-08-11).
LINEAR_FWD_HOST_S = {"x86": 13.48e-6, "grace": 37.08e-6}
# One kernel-launching operator of a Megatron-Core layer's forward+backward costs the host 0.84x
# an nn.Linear forward: 0.88 (dense) and 0.79 (MoE, 8 experts), the mean; measured with
# profilers/host_ops.py host_time_per_op on this project's CPU (AMD EPYC, torch 2.13 CPU,
# megatron-core 0.16.1, 2026-11-25).
OP_OVER_LINEAR = 0.84

# Kernel-launching ATen operators of one Megatron-Core layer (local spec: RMSNorm, grouped-query
# attention, SwiGLU; MoE: alltoall dispatcher, top-k router), by CUDA-graph scope, forward and
# backward; "moe" is the MoE block after the router and preprocessing, "expert" what each local
# expert adds (SequentialMLP; a grouped GEMM runs them as one). profilers/host_ops.py, 2026-11-25.
LAYER_OPS = {
    "fwd": {"attn": 20, "mlp": 12, "moe_router": 15, "moe_preprocess": 7, "moe": 6, "expert": 6},
    "bwd": {"attn": 36, "mlp": 24, "moe_router": 22, "moe_preprocess": 4, "moe": 6, "expert": 11},
}

# Kernel-launching operators an MLA attention forward adds to a grouped-query one, counted in SGLang's
# prompt path (models/deepseek_common/attention_forward_methods/forward_mha.py forward_normal_prepare
# @00cc79fa, the MHA form a prompt without a cached prefix takes): the q_b and kv_b up-projections
# beside the fused q/kv down-projection that replaces the QKV GEMM (2), the q_a and kv_a latent norms
# (2), the rotary part written back into q, the latent KV written to the cache and K assembled from
# k_nope and k_pe (3); unquantized, as LAYER_OPS counts (a quantized linear adds its input's cast).
MLA_EXTRA_FWD_OPS = 7


def host_cpu(cluster) -> str:
    """The host CPU family: Grace where the GPU reaches its host over NVLink-C2C (GH200, GB200)."""
    return "grace" if cluster.host_link.name == "nvlink-c2c" else "x86"


def op_host_s(cluster) -> float:
    """Host seconds to issue one operator of a layer (see LINEAR_FWD_HOST_S, OP_OVER_LINEAR)."""
    linear_s = cluster.host_linear_fwd_s or LINEAR_FWD_HOST_S[host_cpu(cluster)]
    return OP_OVER_LINEAR * linear_s


def _scopes(moe: bool, shared_experts: bool) -> tuple:
    if not moe:
        return ("attn", "mlp")
    return ("attn", "moe_router", "moe_preprocess", "moe", "expert") + (("mlp",) if shared_experts else ())


def layer_fwd_ops(model, layer: int) -> int:
    """Kernel-launching operators of ``model``'s layer ``layer`` forward, by its structure: attention
    (MLA adds MLA_EXTRA_FWD_OPS), then a dense MLP or, on a MoE layer, the router, the dispatch
    preprocessing, the MoE block, the routed experts as one grouped GEMM and the shared experts as a
    dense MLP (LAYER_OPS scopes, _scopes)."""
    moe = model.is_moe_layer(layer)
    ffn = sum(LAYER_OPS["fwd"][s] for s in _scopes(moe, bool(model.num_shared_experts)) if s != "attn")
    attn = LAYER_OPS["fwd"]["attn"] + (MLA_EXTRA_FWD_OPS if model.is_mla else 0)
    return attn + ffn


def layer_host_s(runtime, cluster, *, moe: bool, shared_experts: bool = False, stream_table=None) -> tuple[float, float]:
    """(forward, backward) host seconds of one layer for one micro-batch: its operators outside
    the runtime's CUDA-graph scopes, plus one graph launch per captured scope. The routed
    experts count as one (a grouped GEMM); shared experts as a dense MLP (scope "moe").
    ``stream_table``: a layer table from the runtime's captured operator stream, whose kernels
    are the operators its host issues (graph/opstream.py; no CUDA graphs in eager PyTorch)."""
    if runtime.host_dispatch != "eager":
        return 0.0, 0.0
    if stream_table is not None:
        op_s = op_host_s(cluster)
        return float(stream_table.kernels.sum()) * op_s, float(stream_table.bwd_kernels.sum()) * op_s
    graphed = set(runtime.cuda_graph_scope)
    if "full_iteration" in graphed:
        return 0.0, 0.0
    if "moe" in graphed:  # the whole MoE block: experts and shared experts with it
        graphed |= {"expert", "mlp"} if moe else set()
    op_s = op_host_s(cluster)
    out = []
    for direction in ("fwd", "bwd"):
        ops = sum(LAYER_OPS[direction][s] for s in _scopes(moe, shared_experts) if s not in graphed)
        launches = len(graphed & set(_scopes(moe, shared_experts)) - {"expert"})
        out.append((ops + launches) * op_s)
    return out[0], out[1]


def exposed_host_s(host_fwd_s, host_bwd_s, gpu_fwd_s, gpu_bwd_s, op_s: float, synced_forward: bool):
    """Seconds per layer and micro-batch the GPU waits for the host. Without synchronisations the
    host carries a lead from GPU-heavy passes into host-heavy ones, so only what its forward plus
    backward issue time exceeds the GPU time is exposed. A forward synchronisation (MoE dispatch)
    drains the queue every layer: the forward takes max(host, GPU) on its own and at least the
    issue of the first operator after the wait is exposed; the backward, sync-free, likewise."""
    host_fwd_s, host_bwd_s = np.asarray(host_fwd_s, dtype=float), np.asarray(host_bwd_s, dtype=float)
    if not synced_forward:
        return np.maximum(0.0, host_fwd_s + host_bwd_s - gpu_fwd_s - gpu_bwd_s)
    fwd = np.where(host_fwd_s > 0, np.maximum(host_fwd_s - gpu_fwd_s, op_s), 0.0)
    return fwd + np.maximum(0.0, host_bwd_s - gpu_bwd_s)


def layers_host_s(ctx, stage, *, moe: bool, gpu_fwd_s, gpu_bwd_s):
    """Exposed host seconds of one of the stage's layers per micro-batch (dense, or MoE with
    ``moe``), given the GPU seconds of its forward and backward (recomputation included)."""
    host_fwd, host_bwd, op_s, synced = layer_issue(ctx, stage, moe=moe)
    return exposed_host_s(host_fwd, host_bwd, gpu_fwd_s, gpu_bwd_s, op_s, synced)


def layer_issue(ctx, stage, *, moe: bool) -> tuple:
    """layers_host_s' host side, whatever the GPU's seconds: (forward, backward) host seconds, one
    operator's and whether the forward synchronises. Full recomputation
    issues the forward's operators again in the backward. MoE layers synchronise in the forward
    unless their whole block is a CUDA graph (which needs static, padded shapes)."""
    m = ctx.tables.model
    host_fwd, host_bwd = layer_host_s(ctx.runtime, ctx.cluster, moe=moe, shared_experts=bool(m.num_shared_experts),
                                      stream_table=ctx.tables.layer if ctx.tables.op_stream and not moe else None)
    if stage.recompute == "full":
        host_bwd += host_fwd
    graphed = set(ctx.runtime.cuda_graph_scope)
    synced = moe and not graphed & {"moe", "full_iteration"}
    return host_fwd, host_bwd, op_host_s(ctx.cluster), synced
