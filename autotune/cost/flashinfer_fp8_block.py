"""SGLang's block-FP8 linear on B200 with DeepGEMM off: the activation's per-token-group quantization, then
FlashInfer's groupwise FP8 GEMM, priced wave by wave as measured.

SGLang 0.5.12 (wheel: layers/quantization/fp8_utils.py) picks a 128x128-block FP8 linear's kernel in
``_dispatch_auto_backend``: DeepGEMM where ``deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM``, else on Blackwell with
FlashInfer ``flashinfer_gemm_w8a8_block_fp8_linear_with_fallback``, which quantizes the BF16 input with
``sglang_per_token_group_quant_fp8`` (column-major FP32 scales, one per 128 elements) and calls FlashInfer's
``gemm_fp8_nt_groupwise`` with backend "trtllm" on SM100/103 (``_get_flashinfer_groupwise_backend``; inputs with
K < 256 fall back to Triton, which no DeepSeek linear has). InferenceX's B200 FP8 recipe turns DeepGEMM off
(benchmarks/dsr1_fp8_b200.sh @1fc5d73c: ``export SGL_ENABLE_JIT_DEEPGEMM=false``, renamed SGLANG_* at import by
0.5.12's environ.py), so its rows run this path, not the DeepGEMM linear the profile's
serving_gemm_sglang.fp8_block fit measures.

The kernel as measured (scripts/fit_flashinfer_fp8_block.py holds the rows and the fits): it tiles the output
128 weight rows by 32 tokens (the 32-row steps of sglang PR #13528's N 24576 rows; 148 SMs make the N 576
rows' 1 / 2 / 3 / 5 waves at M 256 / 1024 / 2048 / 4096), each tile looping over K; the first wave takes
3.19 us + 1.84 ns per unit of K, each further wave 2.20 us + 1.36 ns (flashinfer issue #2146's CUPTI rows at
K 1024: 5.08 us one wave, 8.67 two; PR #13528 at K 7168: 16.4 one wave, 28.7 / 41.2 / 63.5 at 2 / 3 / 5),
about 0.73 PFLOP/s at many waves against DeepGEMM's 2.91. A weight larger than L2 is read again from HBM for
every 32 tokens (PR #13528, N 24576 x K 7168: 32-row passes over the time reach 6.9 TB/s at M 1024-2048).
A GEMM of one wave (a decode's) is left at the DeepGEMM linear's measured time (flashinfer_linears_s).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autotune.cost.checkpoint_layout import bf16_attention, bf16_attention_gemms
from autotune.cost.runtime_kernels import gpu_keys
from autotune.cost.serving_ops import ACT_BYTES, quantized_gemms, select_ops
from autotune.graph.table import OpTable

__all__ = ["flashinfer_fp8_block_gpu", "flashinfer_gemms", "flashinfer_linears_s"]

# the GPUs measured: B200, 148 SMs (multiProcessorCount as kernel code bases record it); the N 576 rows' 2 / 3 / 5
# waves at 160 / 320 / 640 tiles (PR #13528, M 1024 / 2048 / 4096) need 128..159
_SMS = {"b200": 148}
# the kernel's output tile: 128 weight rows (the UMMA M side) by 32 tokens (scripts/fit_flashinfer_fp8_block.py)
_TILE_N, _TILE_M = 128, 32
# seconds of a wave of tiles: (latency, per unit of K), first wave and each further one (fit_flashinfer_fp8_block.py)
_FIRST_WAVE = (3.19e-6, 1.844e-9)
_NEXT_WAVE = (2.20e-6, 1.356e-9)
# an FP32 scale per 128 elements of the quantized activation (sglang_per_token_group_quant_fp8, group size 128)
_SCALE_BYTES_PER_ELEMENT = 4.0 / 128


def flashinfer_fp8_block_gpu(device_name: str) -> bool:
    """Whether the kernel is measured on ``device_name``'s GPU."""
    return any(key in _SMS for key in gpu_keys(device_name))


def flashinfer_gemms(table: OpTable, model, weight_dtype: str) -> np.ndarray:
    """The operators of ``table`` the kernel runs: the quantized GEMMs, less attention projections a checkpoint
    keeps in BF16."""
    gemms = quantized_gemms(table)
    return gemms & ~bf16_attention_gemms(model, table) if bf16_attention(model, weight_dtype) else gemms


def flashinfer_linears_s(table: OpTable, device, tokens: np.ndarray, tp: int,
                         one_wave: Callable[[OpTable], np.ndarray]) -> np.ndarray:
    """Seconds of ``table``'s linears (all of them GEMMs the kernel runs) for each token count. A linear whose
    tiles fit in one wave at ``one_wave``'s seconds (the engine's measured DeepGEMM linear, its activation
    quantization inside: flashinfer #2146's CUPTI rows at K 1024 agree within 5%, and the B200 FP8 decode rows,
    TPOT 7.18 ms at one request against 8.0 ms of those kernels, leave no room for a slower one); past one wave
    the activation's quantization at the stream fit, then the kernel's waves, or the weight's HBM passes where
    the weight outgrows L2, whichever is longer (no less than ``one_wave``'s)."""
    sms = next(_SMS[key] for key in gpu_keys(device.name) if key in _SMS)
    width_k = table.in_bytes / ACT_BYTES / np.where(table.in_split, float(tp), 1.0)
    width_n = table.out_bytes / ACT_BYTES / np.where(table.out_split, float(tp), 1.0)
    m = np.asarray(tokens, dtype=float)[:, None]
    row_tiles = np.ceil(m / _TILE_M)
    waves = np.ceil(np.ceil(width_n / _TILE_N) * row_tiles / sms)
    # one wave, then each further one, of tiles looping over K (flashinfer #2146 CUPTI, sglang PR #13528)
    gemm = _FIRST_WAVE[0] + width_k * _FIRST_WAVE[1] + (waves - 1) * (_NEXT_WAVE[0] + width_k * _NEXT_WAVE[1])
    memory = device.memory_regression("stream")
    weights = width_n * width_k * (1.0 + 4.0 / (128 * 128))  # FP8 weights and their 128x128 block scales
    l2 = device.tier("sram").capacity_bytes if device.has_tier("sram") else 0.0
    # a weight past L2 read once for every 32 token rows at the stream fit (sglang PR #13528, N 24576 x K 7168)
    passes = np.where(weights > l2, row_tiles * weights * memory.seconds_per_unit, 0.0)
    # sglang_per_token_group_quant_fp8: BF16 in, FP8 and a scale per 128 out, one kernel a linear
    quant = (memory.latency_s + m * width_k * (ACT_BYTES + 1.0 + _SCALE_BYTES_PER_ELEMENT)
             * memory.seconds_per_unit) / device.kernel_efficiency  # as cost/vllm_fp8_pad.py's copies
    single = np.stack([one_wave(select_ops(table, np.arange(len(table.names)) == i))
                       for i in range(len(table.names))], axis=-1).reshape(m.shape[0], -1)
    return np.where(waves > 1, np.maximum(single, quant + np.maximum(gemm, passes)), single).sum(-1)
