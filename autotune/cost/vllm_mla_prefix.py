"""vLLM's MLA prompt chunk re-expands its request's cached prefix through kv_b_proj, every chunk.

A prompt chunk after P cached tokens of its own request attends to them (the causal pairs the step model
prices already), but the cache holds MLA's latent (kv_lora_rank + rope dims a token), not keys and values: vLLM's
MLA backends (v1/attention/backends/mla/common.py MLACommonImpl._compute_prefill_context, the 0.11.0 and 0.13.0
wheels) gather the prefix's latent into a workspace (ops.gather_and_maybe_dequant_cache, in the model dtype),
run kv_b_proj on it to get the heads' k_nope and v, concatenate k_nope with the broadcast k_pe into the keys
(torch.cat), then run the context attention and merge it with the chunk's own. So each chunk pays, per layer and
per prefix token, the kv_up GEMM (priced as the step's own kv_up, its marginal seconds a token at the step
budget) and the gather's and the concatenation's bytes at the stream-memory fit. A 32k prompt in 8k chunks
re-expands 8k + 16k + 24k prefix tokens. Not priced: the workspace's split of a prefix longer than it
(64k tokens at most, determine_chunked_prefill_workspace_size) into several attention calls and merges.
"""

from __future__ import annotations

import numpy as np

from autotune.cost.serving_mla_bmm import is_kv_up
from autotune.cost.serving_ops import ACT_BYTES, ops_s, select_ops
from autotune.graph.table import OpTable

__all__ = ["prefix_s_per_token"]


def _kv_up_s_per_token(table: OpTable, device, dtype: str, rate: str, tp: int, budget: int) -> float:
    """Marginal seconds a token of the layer's kv_up GEMM between half the step budget and the budget."""
    kv_up = select_ops(table, is_kv_up(table))
    if not len(kv_up.names):
        return 0.0
    n = np.array([budget / 2.0, float(budget)])
    s = ops_s(kv_up, device, dtype, rate, n, tp)
    return float((s[1] - s[0]) / (n[1] - n[0]))


def prefix_s_per_token(table: OpTable, model, device, dtype: str, rate: str, tp: int, kv_bytes: float,
                       budget: int, input_pad: bool = False) -> float:
    """Seconds, all layers, that a prompt chunk spends per cached token of its request's prefix (vLLM's MLA):
    kv_up on it, the latent gathered (read at the cache's bytes, written in BF16) and the keys concatenated
    (the heads' nope part read, nope + rope written, the rope part read once), ``tp`` splitting the heads;
    ``input_pad``: kv_b_proj's BF16 input padded first (cost/vllm_fp8_pad.py: a fill and a copy, 3 x 2 bytes)."""
    if not model.is_mla or budget < 2:
        return 0.0
    heads = model.num_heads / tp
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    gathered = latent * (kv_bytes + ACT_BYTES) + (3 * ACT_BYTES * model.kv_lora_rank if input_pad else 0.0)
    keys = heads * (2 * model.qk_nope_head_dim + model.qk_rope_head_dim) * ACT_BYTES + model.qk_rope_head_dim * ACT_BYTES
    fit = device.memory_regression("stream")
    moves = (gathered + keys) * fit.seconds_per_unit / device.kernel_efficiency
    return model.num_layers * (moves + _kv_up_s_per_token(table, device, dtype, rate, tp, budget))
