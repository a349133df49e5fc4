"""What a step does: a training step (this module) or inference (prefill, decode, serve)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import require, require_choice, require_positive

__all__ = ["TrainingWorkload", "DTYPES", "ATTENTION_IMPLS", "bytes_per_element"]

DTYPES = ("fp32", "bf16", "fp16")
# "flash": fused attention kernel, no s x s matrix in memory (FlashAttention, Dao et al. 2022).
# "unfused": scores, softmax and dropout materialised, as Megatron-LM did before FlashAttention
# (Narayanan et al. SC'21 used its fused scale-mask-softmax kernel).
ATTENTION_IMPLS = ("flash", "unfused")

_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def bytes_per_element(dtype: str) -> int:
    return _BYTES[dtype]


@dataclass(frozen=True, kw_only=True)
class TrainingWorkload:
    """One optimizer step over ``global_batch`` sequences of ``seq_len`` tokens.

    ``dtype="fp32"`` trains in full precision. ``bf16``/``fp16`` are mixed precision: half
    precision weights and activations, fp32 master weights, fp32 gradient accumulation and
    Adam states (Micikevicius et al. 2018; Megatron-LM keeps fp32 ``main_grad`` buffers).
    """

    global_batch: int
    seq_len: int
    dtype: str = "bf16"
    attention_impl: str = "flash"
    kind: str = "train"

    def __post_init__(self) -> None:
        require_positive("global_batch", self.global_batch)
        require_positive("seq_len", self.seq_len)
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
