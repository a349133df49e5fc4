"""Operator time: the roofline of two linear regressions (seed 003's cost model).

    op_time = max(k * latency_c + flops * seconds_per_flop,   # compute regression
                  k * latency_m + bytes * seconds_per_byte)   # memory regression

with k kernel launches. Coefficients come from the device profile (a memory-bound operator
whose kernel the profile fitted on its own, a norm, activation or softmax, uses that fit);
FLOPs and bytes from the operator table divided by the parallel degrees. Every function broadcasts over arrays of
choices (micro-batch, TP, CP, SP), so a search scores thousands of choices in one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from autotune.cost.quantize import cast_s, saved_input_bytes_per_element
from autotune.graph.table import OpTable
from autotune.spec.hardware import DeviceProfile
from autotune.spec.workload import GEMM_OPERAND_BYTES, compute_dtype, gemm_dtype

__all__ = ["BlockTimes", "block_times", "op_coefficients", "OpAmounts", "op_amounts", "memory_role", "saved_ops_bytes",
           "attention_head_dim_speed", "attention_mask_slowdown", "te_saved_input_factor"]

# Which compute regression each operator kind uses; the rest are memory-bound (no FLOPs).
_COMPUTE_CLASS = {"gemm": "gemm", "gemm_fp32": "gemm", "gemm_unaligned": "gemm_unaligned", "bmm": "bmm", "attention": "attention"}


def memory_role(kind: str, name: str) -> str:
    """Which memory-bound kernel fit prices an operator (DeviceProfile.memory_regression).
    Cross-entropy is a log-softmax over the vocabulary plus a gather, so softmax's fit prices it."""
    if kind == "norm":
        return "norm"
    if name in ("ffn_act", "expert_act", "shared_act"):
        return "activation"
    if name in ("softmax", "router_topk") or kind == "loss":
        return "softmax"
    return "stream"


@dataclass(frozen=True, eq=False)
class _Coefficients:
    lat_c: np.ndarray  # per operator, 0 for memory-bound kinds
    spf: np.ndarray
    lat_m: np.ndarray  # per operator
    spb: np.ndarray
    bwd_lat_c: np.ndarray  # the backward's compute fit: the forward's, but fused attention's own where measured
    bwd_spf: np.ndarray


# GEMMs outside Transformer Engine's low-precision modules: Megatron-Core's router is a plain
# torch GEMM (moe/router.py), its output layer a ColumnParallelLinear (the LM head is priced in BF16).
_BF16_GEMMS = ("router",)


def te_saved_input_factor(table: OpTable, dtype: str) -> np.ndarray:
    """Per operator, saved bytes under a Transformer Engine low-precision recipe over BF16's: each
    low-precision linear keeps its input quantized (quantize.saved_input_bytes_per_element over
    BF16's 2 bytes). The output projection's input is the attention output, which the fused
    attention also keeps in BF16 for its own backward, so there the quantized copy is added."""
    share = saved_input_bytes_per_element(dtype) / 2.0
    gemm = np.array([k == "gemm" and n not in _BF16_GEMMS for k, n in zip(table.kinds, table.names)])
    added = np.array([n == "out_proj" for n in table.names])
    return np.where(gemm, np.where(added, 1.0 + share, share), 1.0)


def attention_head_dim_speed(device: DeviceProfile, head_dim: float) -> float:
    """Speed of the device's fused attention kernel at ``head_dim`` relative to its fit (taken at
    head dim 128). Per (query, key) pair a head does 4 d matmul FLOPs but a fixed softmax (one exp,
    on the SFU), so below 128 the exp share grows and the FLOP rate falls (Shah et al. 2024,
    FlashAttention-3 sec. 3.2); the device's measured ratio at 64 (``attention_head_dim_64_speed``),
    interpolated in log2(d) up to 1 at 128. Above 128 the kernel's own figure at 256
    (``attention_head_dim_256_speed``, 1 where none was measured: FlashAttention-3 runs 256 faster
    than 128, cuDNN's sm90 backward slower), interpolated the same way. Held beyond 64 and 256.
    A kernel that pads the head to a
    multiple of ``device.attention_head_dim_tile`` runs at its padded width's speed and does the
    padded width's work: head_dim / padded of it is useful."""
    if head_dim <= 0:
        return 1.0
    tile = device.attention_head_dim_tile
    padded = float(np.ceil(head_dim / tile) * tile) if tile else head_dim
    if padded >= 128:
        s256 = device.attention_head_dim_256_speed
        return (1.0 + (s256 - 1.0) * min(1.0, float(np.log2(padded / 128.0)))) * head_dim / padded
    s64 = device.attention_head_dim_64_speed
    return (s64 + (1.0 - s64) * max(0.0, np.log2(padded / 64.0))) * head_dim / padded


def attention_mask_slowdown(device: DeviceProfile, head_dim: float) -> tuple[float, float]:
    """(forward, backward) time of the fused attention kernel given a mask tensor over its time
    with is_causal at the same shape: the device's measured rows (Runtime.attention_mask_slowdown),
    interpolated in log2(head dim) and held beyond the ends; where none was measured, 2 (a kernel
    given a mask cannot skip the blocks above the diagonal, so it computes all s x s pairs, twice
    the causal ones; FlashAttention-2, Dao 2023, sec. 3.1.1, skips them only under a causal flag)."""
    rows = device.attention_mask_slowdown
    if not rows:
        return 2.0, 2.0
    x = np.log2([row[0] for row in rows])
    at = float(np.log2(max(head_dim, 1.0)))
    return (float(np.interp(at, x, [row[1] for row in rows])), float(np.interp(at, x, [row[2] for row in rows])))


@lru_cache(maxsize=512)
def op_coefficients(table: OpTable, device: DeviceProfile, dtype: str) -> _Coefficients:
    """Per-operator regression coefficients (cached per table, device and dtype)."""
    lat_c, spf, lat_m, spb, bwd_lat_c, bwd_spf = (np.zeros(len(table)) for _ in range(6))
    for i, (kind, name) in enumerate(zip(table.kinds, table.names)):
        op_class = _COMPUTE_CLASS.get(kind)
        if op_class is not None:  # low-precision recipes run only the GEMMs in the low format
            op_dtype = "fp32" if kind == "gemm_fp32" else gemm_dtype(dtype) if op_class.startswith("gemm") \
                else compute_dtype(dtype)
            fit = device.regression(op_class, op_dtype)  # a device without unaligned fits: the GEMM's
            bwd = device.regression(f"{op_class}_bwd", op_dtype) if op_class in ("attention", "gemm_unaligned") else fit
            lat_c[i], spf[i], bwd_lat_c[i], bwd_spf[i] = fit.latency_s, fit.seconds_per_unit, bwd.latency_s, bwd.seconds_per_unit
            if kind == "attention":
                speed = attention_head_dim_speed(device, float(table.head_dim[i]))
                spf[i], bwd_spf[i] = spf[i] / speed, bwd_spf[i] / speed
                if table.masked_share[i]:  # the masked layers' kernels at their slowdown, the rest causal
                    share = float(table.masked_share[i])
                    fwd, bwd = attention_mask_slowdown(device, float(table.head_dim[i]))
                    spf[i], bwd_spf[i] = spf[i] * (1.0 - share + share * fwd), bwd_spf[i] * (1.0 - share + share * bwd)
        memory = device.memory_regression(memory_role(kind, name))
        lat_m[i], spb[i] = memory.latency_s, memory.seconds_per_unit
    eff = device.kernel_efficiency
    return _Coefficients(lat_c=lat_c / eff, spf=spf / eff, lat_m=lat_m / eff, spb=spb / eff,
                         bwd_lat_c=bwd_lat_c / eff, bwd_spf=bwd_spf / eff)


@dataclass(frozen=True, eq=False)
class BlockTimes:
    """Seconds for one micro-batch through one block (arrays broadcast over choices)."""

    fwd_ops_s: np.ndarray  # (..., operators)
    bwd_ops_s: np.ndarray
    selective_fwd_s: np.ndarray  # forward time of the ops selective recomputation redoes
    saved_bytes: np.ndarray  # activation bytes saved for backward, whole block
    selective_saved_bytes: np.ndarray  # of which selective recomputation drops
    weight_bytes: np.ndarray  # parameters held per GPU, in compute-dtype bytes
    params_per_gpu: np.ndarray
    # of fwd_ops_s, the low-precision recipes' casts of the weights (a runtime that reuses them
    # across a step's micro-batches pays them once per step: cost/stage.py _block)
    weight_cast_fwd_ops_s: np.ndarray | float = 0.0

    # the sums kept (read-only): a stage's pricing reads a block's a dozen times (cost/moe_stage.py)
    @cached_property
    def fwd_s(self) -> np.ndarray:
        return _read_only(self.fwd_ops_s.sum(-1))

    @cached_property
    def bwd_s(self) -> np.ndarray:
        return _read_only(self.bwd_ops_s.sum(-1))


def _read_only(x):
    if isinstance(x, np.ndarray):
        x.flags.writeable = False
    return x


def _col(x: object) -> np.ndarray:
    return np.asarray(x, dtype=float)[..., None]


@dataclass(frozen=True, eq=False)
class OpAmounts:
    """Per-GPU forward amounts of each operator for one micro-batch (arrays broadcast over
    choices, operators last)."""

    flops: np.ndarray
    act_in_bytes: np.ndarray
    act_out_bytes: np.ndarray
    weight_bytes: np.ndarray


def op_amounts(table: OpTable, micro_batch: object, tp: object, cp: object, sequence_parallel: object) -> OpAmounts:
    """FLOPs and bytes per GPU: TP splits what the sharding says, SP the tokens of replicated
    ops, CP every activation's tokens."""
    b, t, c = _col(micro_batch), _col(tp), _col(cp)
    sp = np.asarray(sequence_parallel, dtype=bool)[..., None]
    seq_split = np.where(sp & table.runs_replicated, t, 1.0)  # SP splits replicated ops' tokens
    work_div = np.where(table.runs_replicated, seq_split, t) * c
    return OpAmounts(
        flops=table.flops * b / work_div,
        act_in_bytes=table.in_bytes * b / (np.where(table.in_split, t, seq_split) * c),
        act_out_bytes=table.out_bytes * b / (np.where(table.out_split, t, seq_split) * c),
        weight_bytes=table.weight_bytes / np.where(table.weights_split, t, 1.0),
    )


def saved_ops_bytes(table: OpTable, micro_batch: object, tp: object, cp: object, sequence_parallel: object,
                    per_sequence: np.ndarray | None = None) -> np.ndarray:
    """Per-GPU activation bytes each operator saves for backward (operators last): TP splits what
    the sharding says, SP the rest, CP every token. ``per_sequence``: other per-operator bytes, so split."""
    b, t, c = _col(micro_batch), _col(tp), _col(cp)
    sp = np.asarray(sequence_parallel, dtype=bool)[..., None]
    split = np.where(table.saved_split, t, np.where(sp, t, 1.0))
    return (table.saved_bytes if per_sequence is None else per_sequence) * b / (split * c)


def _input_grad_sum_s(table: OpTable, coef: _Coefficients, amounts: OpAmounts) -> np.ndarray:
    """GEMMs sharing one input (unfused Q, K, V) each return an input gradient, which backward sums:
    one kernel reading the n + 1 gradients and writing their sum (torch.compile's Inductor fuses
    the autograd accumulation's adds into one pointwise kernel; eager autograd runs n adds, 3n
    passes), priced on the GEMMs that share the input, the launch split between them. A fused
    projection returns one gradient and sums nothing."""
    shares = table.shares_input.astype(float)
    count = shares.sum()
    if not count:
        return np.zeros_like(amounts.act_in_bytes)
    passes = (count + 2.0) / count  # (count + 1 reads + 1 write) over the count sharing GEMMs
    return shares * (coef.lat_m / count + passes * amounts.act_in_bytes * coef.spb)


def block_times(table: OpTable, device: DeviceProfile, dtype: str, micro_batch: object,
                tp: object, cp: object, sequence_parallel: object, *, fp8_recipe: str = "cast") -> BlockTimes:
    """Forward and backward time of a block for ``micro_batch`` sequences per replica.

    Inputs broadcast against each other; the operator axis is summed away. ``fp8_recipe``: how a
    low-precision recipe's casts run (TrainingWorkload.fp8_recipe, cost/quantize.py).
    """
    coef = op_coefficients(table, device, dtype)
    t = _col(tp)
    amounts = op_amounts(table, micro_batch, tp, cp, sequence_parallel)
    flops, weights = amounts.flops, amounts.weight_bytes
    act = amounts.act_in_bytes + amounts.act_out_bytes
    fwd = np.maximum(table.kernels * coef.lat_c + flops * coef.spf,
                     table.kernels * coef.lat_m + (act + weights) * coef.spb)
    fwd = np.where(table.kernels > 0, fwd, 0.0)  # a captured backward kernel launches nothing forward (graph/opstream.py)
    has_bwd_compute = table.bwd_flops_factor > 0
    bwd_compute = np.where(has_bwd_compute,
                           table.bwd_kernels * coef.bwd_lat_c + flops * table.bwd_flops_factor * coef.bwd_spf, 0.0)
    bwd_memory = table.bwd_kernels * coef.lat_m + (act * table.bwd_bytes_factor + 2.0 * weights) * coef.spb
    bwd = np.where(table.bwd_kernels > 0, np.maximum(bwd_compute, bwd_memory), 0.0)  # a captured forward kernel: none
    weight_cast = 0.0
    if dtype in GEMM_OPERAND_BYTES:
        fwd_cast, bwd_cast, weight_cast = cast_s(table, coef, dtype, amounts, fp8_recipe=fp8_recipe,
                                                 fp8_gemm_any_layout=device.fp8_gemm_any_layout)
        fwd, bwd = fwd + fwd_cast, bwd + bwd_cast
    bwd = bwd + _input_grad_sum_s(table, coef, amounts)
    saved = saved_ops_bytes(table, micro_batch, tp, cp, sequence_parallel)
    if dtype in GEMM_OPERAND_BYTES and fp8_recipe != "cast":
        saved = saved * te_saved_input_factor(table, dtype)
    dropped = saved_ops_bytes(table, micro_batch, tp, cp, sequence_parallel, table.selective_dropped_bytes)
    params = table.params / np.where(table.weights_split, t, 1.0)
    return BlockTimes(
        fwd_ops_s=fwd, bwd_ops_s=bwd,
        selective_fwd_s=(fwd * table.selective).sum(-1),
        saved_bytes=saved.sum(-1), selective_saved_bytes=dropped.sum(-1),
        weight_bytes=weights.sum(-1), params_per_gpu=np.broadcast_to(params.sum(-1), np.shape(fwd.sum(-1))),
        weight_cast_fwd_ops_s=weight_cast,
    )
