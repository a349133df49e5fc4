"""Casts of low-precision recipes: the memory-bound kernels that quantize each GEMM operand.

Each GEMM's input and weight are quantized before the forward GEMM, and its output gradient before
the backward GEMMs (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", sec. 4). What a cast
moves depends on the recipe and on the kernel that made the tensor: Transformer Engine's norm and
activation kernels quantize their own output under some recipes (transformer_engine/pytorch/csrc/
extensions/normalization.cpp and activation.cpp choose FULLY_FUSED, FUSED_*_AMAX or UNFUSED per
quantizer). Amounts are in BF16 bytes (2 an element), so a cast's bytes are its bytes per element / 2.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autotune.cost.comm import collective_time_s
from autotune.graph.table import OpTable
from autotune.spec.workload import GEMM_OPERAND_BYTES

__all__ = ["quantize_bytes_per_element", "producer_cast_bytes_per_element", "cast_s", "amax_all_reduces_per_layer",
           "amax_all_reduce_s", "saved_input_bytes_per_element"]

# Scale bytes each quantized copy carries per element: MXFP8 one E8M0 byte per 32 (OCP Microscaling
# spec v1.0), NVFP4 one E4M3 byte per 16 (NVIDIA, "Pretraining LLMs with NVFP4", arXiv 2509.25149,
# sec. 2; its FP32 per-tensor scale is negligible). Per-tensor FP8 carries one FP32 scale per tensor.
_SCALE_BYTES_PER_ELEMENT = {"mxfp8": 1.0 / 32.0, "nvfp4": 1.0 / 16.0}
# Formats scaled in blocks along the GEMM's reduction dimension: the forward GEMM and the backward
# ones reduce a tensor along different dimensions, so every cast writes a row-wise and a column-wise
# copy (Transformer Engine's MXFP8 and NVFP4 quantizers, rowwise and columnwise usage).
_BLOCK_SCALED = ("mxfp8", "nvfp4")


def quantize_bytes_per_element(dtype: str, *, fp8_gemm_any_layout: bool = False, amax_kernel: bool = False) -> float:
    """HBM bytes moved per element by a standalone cast of one BF16 tensor (2 bytes an element):
    each pass reads the tensor, the cast writes each copy the GEMMs need (operand plus scales).

    * per-tensor FP8 (``fp8``): one copy where the device's FP8 GEMMs take any layout (Blackwell),
      else a row-wise copy and its transpose (Hopper's TN-only GEMMs; TE's cast_transpose). The
      amax comes out of the cast (delayed scaling, torchao) or, with ``amax_kernel`` (TE's current
      scaling: nvte_compute_amax, then nvte_quantize_v2), from a kernel of its own that reads the
      tensor once more: Blackwell 3 / 5 bytes, Hopper 4 / 6.
    * MXFP8: no amax pass (each 32-block's scale is its own max), one kernel writing both copies:
      2 + 2 x (1 + 1/32) = 4.06 bytes.
    * NVFP4: always an amax pass first (the per-tensor FP32 scale sets the E4M3 block scales;
      nvte_hadamard_transform_amax returns the input's amax and, for the Wgrad copy, the amax after
      the random Hadamard transform, in one read), then one kernel writing the row-wise copy and
      the column-wise one through the 16x16 transform (nvte_quantize_with_hadamard_transform;
      weights take 16x16 2D blocks without it, the same bytes): 2 + 2 + 2 x (0.5 + 1/16) = 5.13.
    * ``fp8_rowwise`` (torchao's axiswise recipe) casts every operand once per axis: along the rows
      amax and cast fuse (read 2, write 1), along the columns a reduction pass precedes the cast
      (read 2, then read 2 and write 1): 8 bytes."""
    if dtype == "fp8_rowwise":
        return 8.0
    if dtype in _BLOCK_SCALED:
        copies, passes = 2.0, (2.0 if dtype == "nvfp4" else 1.0)
    else:
        copies, passes = (1.0 if fp8_gemm_any_layout else 2.0), (2.0 if amax_kernel else 1.0)
    return 2.0 * passes + copies * (GEMM_OPERAND_BYTES[dtype] + _SCALE_BYTES_PER_ELEMENT.get(dtype, 0.0))


def producer_cast_bytes_per_element(dtype: str, fp8_recipe: str, producer: str, *,
                                    fp8_gemm_any_layout: bool = False) -> float:
    """Bytes per element the cast of a tensor adds where ``producer`` ("norm", "activation" or
    "other") made it, under ``fp8_recipe`` (spec.workload.FP8_RECIPES) for ``fp8``:

    * TE delayed scaling: norm and activation kernels write FP8 themselves (FULLY_FUSED), so the
      cast adds nothing but, on Hopper, the transpose the backward GEMMs need (read 1, write 1).
    * TE current scaling: they compute the amax in the same kernel (FUSED_NORM_AMAX_FP8 and
      FUSED_ACTIVATION_AMAX_FP8), so the cast reads the tensor once, without an amax pass.
    * MXFP8: activation kernels write MXFP8 themselves; norms do only through cuDNN
      (NVTE_NORM_FWD_USE_CUDNN, not TE's default), so a norm's output takes a standalone cast.
    * NVFP4 with the Hadamard transform and post-transform amax (the recipe's Wgrad copies): UNFUSED,
      the quantizer runs its own amax pass.
    Elsewhere (``other`` producers, the ``cast`` recipe): a standalone cast (quantize_bytes_per_element)."""
    amax_kernel = dtype == "fp8" and fp8_recipe == "te_current"
    standalone = quantize_bytes_per_element(dtype, fp8_gemm_any_layout=fp8_gemm_any_layout, amax_kernel=amax_kernel)
    if producer == "other" or dtype in ("nvfp4", "fp8_rowwise") or (dtype == "fp8" and fp8_recipe == "cast"):
        return standalone
    if dtype == "mxfp8":
        return 0.0 if producer == "activation" else standalone
    if fp8_recipe == "te_delayed":
        return 0.0 if fp8_gemm_any_layout else 2.0
    return quantize_bytes_per_element(dtype, fp8_gemm_any_layout=fp8_gemm_any_layout)  # te_current


_ACTIVATIONS = ("ffn_act", "expert_act", "shared_act")


@lru_cache(maxsize=256)
def _producers(table: OpTable) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Per operator: the kernel that made its input (the operator before it: a norm fused into the
    GEMM's TE LayerNormLinear, an activation) and the one that made its output gradient (the
    operator after it, whose backward runs first: an activation's backward)."""
    kinds, names = list(table.kinds), list(table.names)

    def role(i: int) -> str:
        if not 0 <= i < len(kinds):
            return "other"
        return "norm" if kinds[i] == "norm" else ("activation" if names[i] in _ACTIVATIONS else "other")

    return tuple(role(i - 1) for i in range(len(kinds))), tuple(
        "activation" if role(i + 1) == "activation" else "other" for i in range(len(kinds)))


def _per_op_bytes(table: OpTable, dtype: str, fp8_recipe: str, any_layout: bool) -> tuple[np.ndarray, np.ndarray]:
    fwd_prod, bwd_prod = _producers(table)
    cost = {p: producer_cast_bytes_per_element(dtype, fp8_recipe, p, fp8_gemm_any_layout=any_layout)
            for p in ("norm", "activation", "other")}
    return np.array([cost[p] for p in fwd_prod]), np.array([cost[p] for p in bwd_prod])


def cast_s(table: OpTable, coef: object, dtype: str, amounts: object, *, fp8_recipe: str = "cast",
           fp8_gemm_any_layout: bool = False) -> tuple:
    """Seconds of each GEMM's casts (arrays over operators): the input's and the weight's before
    the forward GEMM, the output gradient's before the backward ones, each a memory-bound kernel
    (``coef``: compute.op_coefficients) launched where it moves bytes. Casts are per GEMM, except
    the input cast of a GEMM that reads the previous GEMM's input (``shares_input``: unfused K and V
    after Q), which that GEMM's cast serves. Weights take a standalone cast. Returns (forward,
    backward, of the forward the weights' casts)."""
    is_gemm = np.array([k == "gemm" for k in table.kinds], dtype=float)
    own_input = 1.0 - table.shares_input
    in_b, out_b = _per_op_bytes(table, dtype, fp8_recipe, fp8_gemm_any_layout)
    w_b = producer_cast_bytes_per_element(dtype, fp8_recipe, "other", fp8_gemm_any_layout=fp8_gemm_any_layout)
    weights = is_gemm * (coef.lat_m + amounts.weight_bytes * (w_b / 2.0) * coef.spb)
    act_in = is_gemm * own_input * ((in_b > 0) * coef.lat_m + amounts.act_in_bytes * (in_b / 2.0) * coef.spb)
    bwd = is_gemm * ((out_b > 0) * coef.lat_m + amounts.act_out_bytes * (out_b / 2.0) * coef.spb)
    return act_in + weights, bwd, weights


def amax_all_reduces_per_layer(dtype: str, fp8_recipe: str, tp: int, sequence_parallel: bool) -> int:
    """Amax all-reduces over the TP group per layer and micro-batch: with sequence parallelism a
    tensor quantized before its all-gather needs one scale on every TP rank, so recipes that take
    the amax from the data (TE's current scaling, NVFP4's per-tensor scale) all-reduce it before the
    cast, on the compute stream (TE's Linear sets an amax reduction group on the column-parallel
    inputs and the row-parallel output gradients: module/linear.py set_quantizer_amax_reduction_group;
    quantizer.cpp waits for the all-reduce): the QKV and FFN-up inputs forward, the output and
    FFN-down projections' output gradients backward. Delayed scaling reduces its amax history once per
    step (left out)."""
    amax_from_data = dtype == "nvfp4" or (dtype == "fp8" and fp8_recipe == "te_current")
    return 4 if amax_from_data and tp > 1 and sequence_parallel else 0


def amax_all_reduce_s(dtype: str, fp8_recipe: str, stage: object, span: object, cluster: object) -> float:
    """Seconds per layer and micro-batch of those all-reduces (4 bytes each, exposed: the cast waits)."""
    count = amax_all_reduces_per_layer(dtype, fp8_recipe,
                                       stage.tp, stage.sequence_parallel)
    return count * collective_time_s("all_reduce", 4.0, span, cluster) if count else 0.0


def saved_input_bytes_per_element(dtype: str) -> float:
    """Bytes per element of the input a Transformer Engine linear keeps for its weight-gradient GEMM
    under a low-precision recipe: the quantized copy, not the BF16 input (TE module/linear.py and
    layernorm_linear.py save ``inputmat`` after quantizing it, its column-wise usage only), with the
    block scales of MXFP8 (1 per 32) and NVFP4 (1 per 16)."""
    return GEMM_OPERAND_BYTES[dtype] + _SCALE_BYTES_PER_ELEMENT.get(dtype, 0.0)
