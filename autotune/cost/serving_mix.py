"""A checkpoint whose linear layers mix weight formats: ModelOpt's AutoQuantize search.

NVIDIA's MLPerf harness quantizes Mixtral 8x7B with ``mtq.auto_quantize`` under an ``effective_bits``
constraint (mlcommons/inference_results_v5.1 @965182b03376 closed/NVIDIA/code/mixtral-8x7b/modelopt/
quantize.py: formats [NVFP4_DEFAULT_CFG, FP8_DEFAULT_CFG, None] with ``--fp4``, else [FP8_DEFAULT_CFG,
None]; the configs' trtllm_checkpoint_flags effective_bits 7.25 on Blackwell, 8.75 on Hopper, v5.0's
checkpoint mixtral-8x7b-instruct-v0.1-tp1pp1-fp4-e7.25). The search gives each layer group (a layer's
q/k/v, its experts' w1/w2/w3, ...) one format so that the weights average at most that many bits, a
format counting sum(num_bits) + 1 bits a weight: NVFP4 (E2M1) 4, FP8 (E4M3) 8, unquantized 16
(NVIDIA/TensorRT-Model-Optimizer @17e0c3f5 modelopt/torch/quantization/algorithms.py
estimate_quant_compression, AutoQuantizeSearcher.run_search: weight numel x compression over all
quantized linears). Which layers got which format is in the checkpoint (not published), so the mix
is priced as the two narrowest formats the search offered in the shares that average the published
bits, each GEMM a share of its layers in each (a layer runs wholly in one format; the step's linear
time is the layers' sum). At the datasheet rates (FP4 = 2 x FP8 = 4 x BF16) any mix of the same bits
would cost the same; the device fits' other ratios make the split matter (docs/serving.md).
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from autotune.errors import require

__all__ = ["AUTOQUANTIZE_BITS", "autoquantize_mix", "blend_steps"]

# ModelOpt's bits a weight per format (estimate_quant_compression: (exponent + mantissa bits + sign) / 16 x 16)
AUTOQUANTIZE_BITS = {"nvfp4": 4.0, "fp8": 8.0, "bf16": 16.0}
# the next wider format the harness's search offers (quantize.py q_format; None = the FP16 checkpoint, priced as BF16)
_WIDER = {"nvfp4": "fp8", "fp8": "bf16"}


def autoquantize_mix(precision: str, effective_bits: float) -> tuple[tuple[str, float], ...]:
    """The (format, share of the linear weights) pairs of an AutoQuantize checkpoint of narrowest format
    ``precision`` at ``effective_bits``: that format and the next wider one, in the shares whose bits
    average ``effective_bits``."""
    require(precision in _WIDER, "effective_bits", f"an AutoQuantize mix starts at nvfp4 or fp8, not {precision!r}")
    wide = _WIDER[precision]
    lo, hi = AUTOQUANTIZE_BITS[precision], AUTOQUANTIZE_BITS[wide]
    require(lo <= effective_bits <= hi, "effective_bits",
            f"{effective_bits} is outside {precision}'s {lo:g}..{wide}'s {hi:g} bits a weight")
    wide_share = (effective_bits - lo) / (hi - lo)  # lo (1 - s) + hi s = effective_bits
    return tuple((dtype, share) for dtype, share in ((precision, 1.0 - wide_share), (wide, wide_share)) if share > 0)


def blend_steps(steps: tuple, shares: tuple[float, ...]):
    """One StepModel from ``steps`` (the same replica with its weights in each format) weighted by ``shares``:
    every cost table and coefficient and the weight bytes are the shares' sums (what the format does not touch,
    attention and the KV cache, is equal in all and stays so); counts (layers, DP ranks) are the first step's."""
    require(len(steps) == len(shares) and len(steps) >= 1, "weight_mix", "needs one share a step")
    require(abs(sum(shares) - 1.0) < 1e-9 and min(shares) >= 0, "weight_mix", f"shares must sum to 1, got {shares}")
    first, changes = steps[0], {}
    for f in fields(first):
        values = [getattr(s, f.name) for s in steps]
        if isinstance(values[0], np.ndarray):
            changes[f.name] = sum(w * v for w, v in zip(shares, values))
        elif isinstance(values[0], float):
            changes[f.name] = float(sum(w * v for w, v in zip(shares, values)))
    return replace(first, **changes)
