"""One operator of the graph: what it computes, moves and keeps, and how tensor parallelism
splits it; the two builders (a linear layer, an elementwise kernel) every layer family uses."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.spec.model import ModelSpec

__all__ = ["Operator", "SHARDINGS", "TP_SPLIT", "OP_KINDS"]

# How tensor parallelism (Megatron-LM, Shoeybi et al. 2019) splits an operator:
#   column: weight split by output features (QKV, FFN up/gate, logits over the vocabulary);
#           input whole on every rank, output split.
#   row:    weight split by input features (output projection, FFN down); input split, output
#           whole (partial sums, then all-reduce or reduce-scatter).
#   split:  everything split (attention by heads, the FFN activation, the vocab-parallel loss).
#   vocab:  the embedding table split by vocabulary rows; input and output whole.
#   replicated: norms, residual adds, dropout: whole on every rank, unless sequence
#           parallelism (Korthikanti et al. 2022) splits their tokens.
#   expert: routed experts (graph/moe_ops.py): weights split over ep x etp, not TP; tokens
#           split like "split" (each rank routes its own tokens); priced by cost/moe.py.
# Whole tensors of column/row ops and all tensors of replicated ops are split by sequence
# parallelism when saved for backward; context parallelism splits every activation's tokens.
SHARDINGS = ("column", "row", "split", "vocab", "replicated", "expert")
# (input split, output split, saved split) by TP, per sharding
TP_SPLIT = {
    "column": (False, True, False),
    "row": (True, False, True),
    "split": (True, True, True),
    "vocab": (False, False, False),
    "replicated": (False, False, False),
    "expert": (True, True, True),
}
# gemm_fp32: a GEMM run in fp32 whatever the step's dtype (a captured stream's, graph/opstream.py);
# gemm_unaligned: a 16-bit GEMM with a dimension cuBLAS cannot use its 16-byte-aligned kernels for
# (a vocabulary of 50,257: graph/opstream.py), priced at the runtime's unaligned speed
OP_KINDS = ("gemm", "gemm_fp32", "gemm_unaligned", "bmm", "attention", "elementwise", "norm", "embedding", "loss")


@dataclass(frozen=True, kw_only=True)
class Operator:
    name: str
    kind: str
    flops: float  # forward FLOPs executed for one sequence
    model_flops: float  # forward FLOPs under the usual model-FLOPs convention (full s x s attention)
    act_in_bytes: float  # forward activation bytes read, one sequence
    act_out_bytes: float  # forward activation bytes written, one sequence
    weight_bytes: float  # forward weight bytes read (independent of batch)
    params: int
    saved_bytes: float  # activation bytes kept for backward, one sequence
    sharding: str
    bwd_flops_factor: float = 0.0  # backward FLOPs / forward FLOPs
    bwd_bytes_factor: float = 1.5  # backward activation bytes / forward activation bytes
    kernels: int = 1
    bwd_kernels: int = 1
    selective_recompute: bool = False  # forward redone in backward under selective recomputation
    selective_dropped_bytes: float = 0.0  # part of saved_bytes not kept under selective recomputation
    shares_input: bool = False  # a GEMM reading the previous GEMM's input tensor: one low-precision cast serves both
    head_dim: float = 0.0  # a fused attention kernel's query/key head width (its speed depends on it)
    # the share of the layers whose fused attention is given an explicit mask instead of is_causal
    # (transformers on windowed layers): no causal block skipping, priced by cost/compute.py
    masked_share: float = 0.0


def _norm(name: str, m: ModelSpec, s: int, e: int, width: int = 0, *, sharding: str = "replicated",
          params: int | None = None) -> Operator:
    # LayerNorm/RMSNorm: read x, write y; saves its input (Korthikanti: 2sbh per norm).
    w = width or m.hidden_size
    return Operator(
        name=name, kind="norm", flops=5.0 * s * w, model_flops=0.0,
        act_in_bytes=s * w * e, act_out_bytes=s * w * e,
        weight_bytes=w * e, params=w * (2 if m.norm == "layernorm" else 1) if params is None else params,
        saved_bytes=s * w * e, sharding=sharding,
    )


def _linear(name: str, s: int, d_in: int, d_out: int, e: int, sharding: str, bias: bool,
            save_input: bool = True, shares_input: bool = False) -> Operator:
    # y = x W: 2 s d_in d_out FLOPs; backward computes dX and dW, twice the forward FLOPs.
    flops = 2.0 * s * d_in * d_out
    return Operator(
        name=name, kind="gemm", flops=flops, model_flops=flops,
        act_in_bytes=s * d_in * e, act_out_bytes=s * d_out * e,
        weight_bytes=d_in * d_out * e, params=d_in * d_out + (d_out if bias else 0),
        saved_bytes=s * d_in * e if save_input else 0.0, sharding=sharding,
        bwd_flops_factor=2.0, bwd_bytes_factor=2.0,
        bwd_kernels=2, shares_input=shares_input,
    )


def _elementwise(name: str, s: int, width: int, e: int, *, reads: float, writes: float,
                 saved: float, sharding: str = "replicated", selective: bool = False) -> Operator:
    return Operator(
        name=name, kind="elementwise", flops=0.0, model_flops=0.0,
        act_in_bytes=reads * s * width * e, act_out_bytes=writes * s * width * e,
        weight_bytes=0.0, params=0, saved_bytes=saved, sharding=sharding,
        selective_recompute=selective,
    )
