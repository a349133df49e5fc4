"""The sampler's GPU time per step: the memory-bound passes an engine makes over the
[sampled rows x vocabulary] logits after the LM head, beside the head GEMM and the logits
all-gather that cost/serving_step.py ``_head_s`` prices.

Every serving client this project checks asks for greedy decoding (docs/serving.md "The sampler
per step"): ``vllm bench serve`` sends temperature 0.0 (vllm-0.10.2 / 0.11.0 / 0.13.0 wheels,
vllm/benchmarks/serve.py 'Default to greedy decoding'), SGLang's bench_serving and InferenceX's
client send temperature 0.0 in every OpenAI and native payload. A greedy step is therefore not
a top-k / top-p sort but a few streaming kernels over the logits: the engines' presets list
the bytes each kernel moves per logit (``sampler_pass_bytes``), and, under TP without attention
DP, the copy that turns the gathered logits back into rows (``logits_gather_copy_bytes``:
GroupCoordinator.all_gather's movedim + reshape after all_gather_into_tensor)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.spec.hardware import DeviceProfile

__all__ = ["logits_passes_s", "with_sampler"]


def logits_passes_s(device: DeviceProfile, vocab_size: int, rows: np.ndarray, pass_bytes: tuple[float, ...]) -> np.ndarray:
    """Seconds of kernels that each stream ``pass_bytes[i]`` bytes per logit over ``rows`` x
    ``vocab_size`` logits, at the device's measured memory-bound (stream) fit and kernel efficiency,
    as cost/compute.py op_coefficients prices any elementwise operator; zero for no rows."""
    rows = np.asarray(rows, dtype=float)
    fit = device.memory_regression("stream")
    # one launch per pass, each moving its bytes over the whole [rows x vocabulary] block
    seconds = sum(fit.latency_s + b * rows * vocab_size * fit.seconds_per_unit for b in pass_bytes)
    return np.where(rows > 0, seconds / device.kernel_efficiency, 0.0) if pass_bytes else 0.0 * rows


def with_sampler(step, vocab_size: int, device: DeviceProfile, shape, pass_bytes: tuple[float, ...],
                 gather_copy_bytes: float):
    """``step`` (a StepModel) with the sampler's passes added to ``head_s``: a rank's own rows under
    attention DP (as ``_head_s`` takes them), else every row on every TP rank (each rank samples the
    gathered logits), plus the gathered logits' reshape copy when the head is TP-split."""
    sampled = np.arange(len(step.head_s), dtype=float)
    rows = sampled / shape.tp if shape.attention_dp else sampled
    split = shape.op_tp > 1 and not shape.attention_dp and gather_copy_bytes > 0
    passes = tuple(pass_bytes) + ((gather_copy_bytes,) if split else ())
    if not passes:
        return step
    return replace(step, head_s=step.head_s + logits_passes_s(device, vocab_size, rows, passes))
