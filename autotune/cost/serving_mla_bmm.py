"""MLA's key/value up-projection in a serving step: decodes run it as two BMMs over heads at the engine's
measured cost, prompt tokens as the one ``kv_up`` GEMM of the operator table.

Decoding in the absorbed form (DeepSeek-V2, arXiv 2405.04434, sec. 2.1.3) folds W_UK into the query and
W_UV into the output: per layer a token's q_nope (heads x 128) is multiplied by each head's W_UK (128 x
512) into the latent the kernel scores, and the kernel's latent output (heads x 512) by each head's W_UV
(512 x 128), two batched GEMMs over the heads a GPU runs (TensorRT-LLM's MLA.forward_generation
bmm_out / fp8_block_scaling_bmm_out; SGLang's DeepseekV2AttentionMLA.forward_absorb torch.bmm on
w_kc, w_vc). Their FLOPs and weight bytes are the ``kv_up`` GEMM's (heads x 128 x 512 weights each),
but each head's GEMM is a thin one: aiconfigurator measures them at 8-11 us per layer at a few tokens
and 300-770 TFLOPS at thousands (scripts/fit_mla_bmm.py), where the one GEMM the table holds prices
2-4 us and the GEMM fit's rate. A prompt (context) token expands the latent through kv_b_proj, the GEMM
the table prices (TensorRT-LLM's MLA.forward_context, SGLang's forward_normal).

The engine's rows (ServingEngine.mla_bmm): [GPU key, BMM dtype, heads a GPU runs, latency_s, seconds
per token], both BMMs of one layer, time = latency + s x tokens.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.checkpoint_layout import bf16_attention
from autotune.graph.table import OpTable

__all__ = ["KV_UP", "mla_bmm_fit", "decode_bmm_s", "is_kv_up"]

KV_UP = "kv_up"  # graph/operators.py _mla_projections: the up projection of the latent to every head's key and value


def is_kv_up(table: OpTable) -> np.ndarray:
    return np.array([n == KV_UP for n in table.names])


def mla_bmm_fit(rows: tuple, gpu_keys: tuple[str, ...], model, weight_dtype: str, heads: int) -> tuple[float, float] | None:
    """(latency_s, s per token) of the engine's two absorbed BMMs of one layer on ``heads`` heads a GPU, for
    the first of ``gpu_keys`` with a row; None where none has. FP8 rows where the checkpoint's attention is
    FP8 and the engine lists FP8 rows (it runs FP8 BMMs), else BF16 ones: an engine that dequantizes the
    checkpoint's W_UK / W_UV lists none (SGLang's DeepseekV2ForCausalLM.post_load_weights: block_quant_dequant
    to BF16 for 128 x 128 block scales on CUDA), and NVFP4 checkpoints keep attention in BF16."""
    fp8 = weight_dtype == "fp8" and not bf16_attention(model, weight_dtype)
    table = {(gpu, dtype, h): (float(lat), float(per)) for gpu, dtype, h, lat, per in rows}
    for key in gpu_keys:
        for dtype in ("fp8", "bf16") if fp8 else ("bf16",):
            if (key, dtype, heads) in table:
                return table[(key, dtype, heads)]
    return None


def decode_bmm_s(fit: tuple[float, float], layers: int, tokens: np.ndarray) -> np.ndarray:
    """Both BMMs of every layer for each count of decode tokens one GPU runs (none for zero tokens)."""
    latency_s, per_token_s = fit
    return np.where(tokens > 0, layers * (latency_s + per_token_s * tokens), 0.0)
