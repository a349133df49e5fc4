"""What a step does: a training step (this module) or inference (prefill, decode, serve)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import require, require_choice, require_positive
from autotune.spec.limits import LIMITS, check_limit
from autotune.spec.runtime import ATTENTION_IMPLS

__all__ = ["TrainingWorkload", "InferenceWorkload", "INFERENCE_KINDS", "DTYPES",
           "bytes_per_element", "LOW_PRECISION_DTYPES", "GEMM_OPERAND_BYTES", "gemm_dtype", "compute_dtype",
           "Workload", "is_training", "MAX_IMBALANCE", "MAX_TARGET_S"]

# "fp8": FP8 GEMMs (E4M3 forward, E5M2 or E4M3 gradients) with per-tensor scales, BF16
# everywhere else, FP32 master weights and gradients (Micikevicius et al. 2022, "FP8 Formats
# for Deep Learning"; Transformer Engine, torchao float8). "mxfp8": the same with a shared
# scale per 32 elements (OCP Microscaling spec v1.0), in hardware on Blackwell. "nvfp4": FP4
# E2M1 GEMMs with a scale per 16 elements (NVIDIA Blackwell), BF16 elsewhere.
# "fp8_rowwise": FP8 with a scale per row of each operand (torchao's rowwise recipe), whose
# GEMMs run slower than per-tensor scaling on H100.
LOW_PRECISION_DTYPES = ("fp8", "fp8_rowwise", "mxfp8", "nvfp4")
DTYPES = ("fp32", "bf16", "fp16", *LOW_PRECISION_DTYPES)
# Inference in fp8 / nvfp4 serves a pre-quantized checkpoint: GEMM weights stored and read at 1 / 0.5
# byte, no per-pass weight casts, activations and the KV cache in BF16 (cost/inference.py
# _prequantized; FP8 KV caches are the serving engine's setting, autotune/spec/serving_engine.py).
# vLLM (quantization fp8), SGLang and TensorRT-LLM (ModelOpt FP8/NVFP4 checkpoints) serve them.
INFERENCE_DTYPES = ("fp32", "bf16", "fp16", "fp8", "nvfp4")
# The attention kernels (flash, unfused, unfused_eager_mask) are the runtime's (spec/runtime.py).

# Bytes per activation element: low-precision recipes keep activations in BF16.
_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp8_rowwise": 2, "mxfp8": 2, "nvfp4": 2}
# Bytes per element of a GEMM operand after the cast (scales aside).
GEMM_OPERAND_BYTES = {"fp8": 1.0, "fp8_rowwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}


def bytes_per_element(dtype: str) -> int:
    return _BYTES[dtype]


def gemm_dtype(dtype: str) -> str:
    """The dtype dense matmuls run in (the device's GEMM fit for it prices them)."""
    return dtype


def compute_dtype(dtype: str) -> str:
    """The dtype of everything but the GEMMs: BF16 under the low-precision recipes."""
    return "bf16" if dtype in LOW_PRECISION_DTYPES else dtype


@dataclass(frozen=True, kw_only=True)
class TrainingWorkload:
    """One optimizer step over ``global_batch`` sequences of ``seq_len`` tokens.

    ``dtype="fp32"`` trains in full precision. ``bf16``/``fp16`` are mixed precision: half
    precision weights and activations, fp32 master weights, fp32 gradient accumulation and
    Adam states (Micikevicius et al. 2018; Megatron-LM keeps fp32 ``main_grad`` buffers).
    ``fp8``/``mxfp8``/``nvfp4`` run the GEMMs in that format and keep BF16 otherwise.
    """

    global_batch: int
    seq_len: int
    dtype: str = "bf16"
    attention_impl: str = "flash"
    kind: str = "train"
    # Mixture of experts: the busiest expert-parallel rank's routed tokens over the mean. 0: the
    # floor of unskewed routing (cost/moe.py load_imbalance); >= 1: a measured max/mean.
    expert_load_imbalance: float = 0.0

    def __post_init__(self) -> None:
        require_positive("global_batch", self.global_batch)
        require_positive("seq_len", self.seq_len)
        check_limit("global_batch", self.global_batch, "global_batch")
        check_limit("seq_len", self.seq_len, "seq_len")
        _check_imbalance(self.expert_load_imbalance)
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        require(self.kind == "train", "workload", "TrainingWorkload.kind is always 'train'")

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (the compute dtype)."""
        return _BYTES[self.dtype]

    @property
    def mixed_precision(self) -> bool:
        return self.dtype != "fp32"

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


# The busiest of ep ranks holds at most ep times the mean load, and ep is at most the GPUs
# (spec/limits.py); a larger max/mean is a typo.
MAX_IMBALANCE = float(LIMITS["gpus"][0])
# A service target (TPOT, TTFT) of more than an hour constrains no plan: refused as a typo.
MAX_TARGET_S = 3600.0


def _check_imbalance(value: object) -> None:
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and (value == 0 or 1 <= value <= MAX_IMBALANCE),
            "expert_load_imbalance", f"must be 0 (model it) or a max/mean load from 1 to {MAX_IMBALANCE:g} "
                                     f"(at most the expert-parallel ranks), got {value!r}")


# prefill: run the prompts once and fill the KV cache; decode: generate tokens with the prompts
# already cached; serve: a static batch of requests, prefill then decode.
INFERENCE_KINDS = ("prefill", "decode", "serve")


@dataclass(frozen=True, kw_only=True)
class InferenceWorkload:
    """``batch`` sequences (concurrent requests) with ``prompt_len`` prompt tokens each.

    ``prefill`` processes the prompts and writes their K and V (the KV cache) for later decoding.
    ``decode`` starts with ``prompt_len`` tokens per sequence in the KV cache and generates
    ``output_len`` tokens, one decode step each (a step feeds one token per sequence and attends
    over everything before it). ``serve`` is a static batch: the prefill gives every request its
    first token, then ``output_len - 1`` decode steps give the rest. Weights, activations and the
    KV cache are in ``dtype``. ``target_tpot_s`` / ``target_ttft_s`` (0: none) are service
    targets a plan must meet.
    """

    batch: int
    prompt_len: int
    output_len: int = 0
    kind: str = "decode"
    dtype: str = "bf16"
    attention_impl: str = "flash"
    target_tpot_s: float = 0.0
    target_ttft_s: float = 0.0
    expert_load_imbalance: float = 0.0  # as TrainingWorkload's: the busiest EP rank's routed tokens over the mean

    def __post_init__(self) -> None:
        _check_imbalance(self.expert_load_imbalance)
        require_choice("workload", self.kind, INFERENCE_KINDS)
        require_positive("batch", self.batch)
        require_positive("prompt_len", self.prompt_len)
        check_limit("batch", self.batch, "batch")
        check_limit("prompt_len", self.prompt_len, "seq_len")
        require_choice("dtype", self.dtype, INFERENCE_DTYPES)
        require_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        if self.kind != "prefill":
            require_positive("output_len", self.output_len)
        require(isinstance(self.output_len, int) and not isinstance(self.output_len, bool) and self.output_len >= 0,
                "output_len", f"must be a whole number >= 0, got {self.output_len!r}")
        check_limit("output_len", self.output_len, "seq_len")
        for name in ("target_tpot_s", "target_ttft_s"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_TARGET_S, name,
                    f"must be 0 (no target) or a time up to {MAX_TARGET_S:g} s (a longer target constrains nothing), "
                    f"got {value!r}")
        self._check_idle()

    def _check_idle(self) -> None:
        """Arguments the kind never reads are refused, not ignored: prefill generates no token (no
        output_len, no TPOT), decode starts with the prompts cached (no TTFT)."""
        idle = {"prefill": (("output_len", "generates no tokens"), ("target_tpot_s", "has no decode step")),
                "decode": (("target_ttft_s", "starts with the prompts cached (no prefill)"),), "serve": ()}
        for name, why in idle[self.kind]:
            require(not getattr(self, name), name, f"a {self.kind} workload {why}: give 0, or kind 'serve'")

    @property
    def activation_bytes(self) -> int:
        return _BYTES[self.dtype]

    @property
    def global_batch(self) -> int:
        """Sequences a plan must cover (``micro_batch x num_microbatches x dp``)."""
        return self.batch

    @property
    def seq_len(self) -> int:
        """Tokens per sequence in the prefill pass (the prompt)."""
        return self.prompt_len

    @property
    def decode_steps(self) -> int:
        """Decode steps: ``output_len`` for decode, ``output_len - 1`` after a serving prefill."""
        return {"prefill": 0, "decode": self.output_len, "serve": self.output_len - 1}[self.kind]

    @property
    def max_context_len(self) -> int:
        """Positions per sequence the KV cache holds at the end (the model's limit applies)."""
        return self.prompt_len + self.decode_steps

    @property
    def mean_decode_context_len(self) -> float:
        """Positions a decode step attends over, averaged over the steps: P+1 ... P+steps."""
        return self.prompt_len + (self.decode_steps + 1) / 2.0


Workload = TrainingWorkload | InferenceWorkload


def is_training(workload: Workload) -> bool:
    """Whether ``workload`` is a training step (the type says it, not a kind string)."""
    return isinstance(workload, TrainingWorkload)
