"""Which GEMMs a pre-quantized serving checkpoint leaves out of its weight format.

An NVFP4 checkpoint of an MLA model (DeepSeek-V3/R1) keeps its attention projections in BF16: ModelOpt's
DeepSeek recipe sets quant_cfg "*attn*" to {"enable": False} unless --mla_quant asks for FP8
(NVIDIA/TensorRT-Model-Optimizer examples/deepseek/ptq.py @1030a2210d8d, the recipe nvidia/DeepSeek-R1-FP4
is made with), and TensorRT-LLM runs it so ("64x Attention Modules: bf16", docs/source/blogs/tech_blog/
blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md @01c4ece9).
NVIDIA's -v2 releases (nvidia/DeepSeek-R1-FP4-v2, nvidia/DeepSeek-R1-0528-FP4-v2 model cards: "Compared to
nvidia/DeepSeek-R1-0528-FP4, this checkpoint additionally quantizes the wo module in attention layers") run the
output projection in NVFP4 (ModelSpec.nvfp4_out_proj); the other attention projections stay BF16.
"""

from __future__ import annotations

import numpy as np

from autotune.graph.table import OpTable
from autotune.spec.model import ModelSpec

__all__ = ["bf16_attention", "attention_gemms", "bf16_attention_gemms"]

_ATTENTION_GEMMS = ("qkv_proj", "q_up", "kv_up", "out_proj")


def bf16_attention(model: ModelSpec, weight_dtype: str) -> bool:
    """Whether ``model``'s ``weight_dtype`` checkpoint keeps its attention projections in BF16."""
    return weight_dtype == "nvfp4" and model.is_mla


def attention_gemms(table: OpTable) -> np.ndarray:
    """Which of the table's operators are attention projections."""
    return np.array([n in _ATTENTION_GEMMS for n in table.names])


def bf16_attention_gemms(model: ModelSpec, table: OpTable) -> np.ndarray:
    """Which of the table's operators are attention projections the checkpoint keeps in BF16 (bf16_attention
    true): all of them, or all but the output projection where its NVFP4 release quantizes that too."""
    kept = _ATTENTION_GEMMS if not model.nvfp4_out_proj else tuple(n for n in _ATTENTION_GEMMS if n != "out_proj")
    return np.array([n in kept for n in table.names])
