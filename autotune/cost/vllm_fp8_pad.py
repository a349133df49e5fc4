"""vLLM 0.10.2-0.11's block-FP8 linear on Hopper copies its BF16 input into a padded buffer on every call.

vLLM 0.10.2 and 0.11.0 run a 128 x 128 block-scaled FP8 checkpoint's linear layers on SM90 with CUTLASS's
blockwise kernel (vLLM PR #23280, "Use upstream CUTLASS for SM90 Block FP8 kernel": that kernel needs M % 4 == 0)
where DeepGEMM is not installed (it is an optional package: utils/deep_gemm.py is_deep_gemm_supported needs
``deep_gemm`` importable; `pip install vllm` does not bring it). Before quantizing the activation,
``apply_w8a8_block_fp8_linear`` (model_executor/layers/quantization/utils/fp8_utils.py in the 0.10.2 and 0.11.0
wheels) pads the BF16 input by ``num_pad = 4 - (M % 4)`` rows, which is 4 when M is already a multiple of 4, so
every call pads: ``torch.nn.functional.pad`` is ``constant_pad_nd``, which allocates the padded tensor, fills
all of it and copies the input in (pytorch/pytorch @521b5e9f aten/src/ATen/native/PadNd.cpp), two memory-bound
kernels over M x K BF16 elements. It runs inside a registered custom op (torch.ops.vllm.apply_w8a8_block_fp8_linear),
so torch.compile does not fuse it away. vLLM PR #24666 moved the linear to an op class that pads by -M % 4 (none
when M is a multiple of 4): the 0.13.0 wheel's ``_padded_cutlass`` pads only then. Not priced: the 0.13+ pad of
the FP8 input where M % 4 != 0; the kv_b_proj (MLA's kv_up) of prompt tokens, which decodes skip (the absorbed
BMMs), 4% of DeepSeek-V3's padded bytes.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.runtime_kernels import gpu_keys
from autotune.cost.serving_ops import ACT_BYTES, quantized_gemms
from autotune.graph.table import OpTable
from autotune.spec.runtime import Runtime
from autotune.spec.serving_engine import release_number

__all__ = ["PAD_ROWS", "PAD_RELEASES", "fp8_block_pad_s", "layers_pad_s", "pads_fp8_block_input", "release_fp8_pad_runtime"]

# rows the SM90 path adds whatever M is (fp8_utils.py apply_w8a8_block_fp8_linear: 4 - (M % 4), 0.11.0 wheel)
PAD_ROWS = 4
# the releases with the unconditional pad: from PR #23280 (in the 0.10.2 wheel, not in 0.10.1) to before #24666
# (the 0.11.0 wheel still pads by 4 - M % 4; 0.13.0's _padded_cutlass pads only when M % 4 != 0)
PAD_RELEASES = ((0, 10, 2), (0, 11, 1))
# the kernels constant_pad_nd launches: the fill of the whole padded tensor, the copy of the input
_PAD_KERNELS = 2
# MLA's key/value up-projection runs on prompt tokens only (decodes take the absorbed BMMs): left out
_PROMPT_ONLY = ("kv_up",)


def release_fp8_pad_runtime(runtime: Runtime, version: str) -> Runtime:
    """``runtime`` with release ``version``'s block-FP8 input pad: on for vLLM 0.10.2-0.11.0, as it was else."""
    engine, release = runtime.serving, release_number(version) or ()
    if engine is None or engine.engine != "vllm" or not release:
        return runtime
    lo, hi = PAD_RELEASES
    pads = lo <= release < hi
    return runtime if pads == engine.fp8_block_input_pad else \
        runtime.with_changes(serving=engine.with_changes(fp8_block_input_pad=pads))


def pads_fp8_block_input(engine_pads: bool, model, weight_dtype: str, device_name: str) -> bool:
    """Whether a step pays the pad: the release pads, the checkpoint is block-scaled FP8, the GPU is Hopper."""
    return engine_pads and weight_dtype == "fp8" and model.fp8_block_scaled and "hopper" in gpu_keys(device_name)


def fp8_block_pad_s(table: OpTable, device, tokens: np.ndarray, tp: int) -> np.ndarray:
    """Seconds one layer of ``table`` spends padding its block-FP8 linears' BF16 inputs, for each token count:
    per linear a fill of (M + 4) x K elements and a copy of M x K (read and write), K its input width a GPU,
    at the device's stream-memory fit and kernel efficiency (the fit's latency a kernel)."""
    keep = quantized_gemms(table) & np.array([n not in _PROMPT_ONLY for n in table.names])
    width = float((table.in_bytes / ACT_BYTES / np.where(table.in_split, float(tp), 1.0))[keep].sum())
    if not width:
        return np.zeros_like(tokens, dtype=float)
    fit = device.memory_regression("stream")
    moved = ((tokens + PAD_ROWS) + 2.0 * tokens) * width * ACT_BYTES  # fill's writes, copy's read and write
    return (int(keep.sum()) * _PAD_KERNELS * fit.latency_s + moved * fit.seconds_per_unit) / device.kernel_efficiency


def layers_pad_s(blocks, device, tokens: np.ndarray, tp: int) -> np.ndarray:
    """The pad of every layer: ``blocks`` as (layer count, layer table or None) pairs."""
    return sum((count * fp8_block_pad_s(table, device, tokens, tp) for count, table in blocks if count and table is not None),
               np.zeros_like(tokens, dtype=float))
