"""Parameter counts of a :class:`ModelSpec`, layer by layer, as ``transformers`` builds the model.

Each count is the sum of the weight matrices and vectors of the modules the Hugging Face
implementations create (``tests/test_hf_configs.py`` checks them against models built on the
meta device); buffers (rotary tables, DeepSeek-V3's router score-correction bias) are not
parameters and are not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.spec.model import ModelSpec

__all__ = ["parameter_count", "attention_parameters", "dense_ffn_parameters", "expert_parameters",
           "moe_ffn_parameters", "norm_parameters"]


def norm_parameters(m: ModelSpec, width: int, *, rms: bool | None = None) -> int:
    """LayerNorm has a scale and a shift per feature, RMSNorm a scale."""
    is_rms = m.norm == "rmsnorm" if rms is None else rms
    return width * (1 if is_rms else 2)


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def _bias(m: ModelSpec, which: str) -> bool:
    value = getattr(m, which)
    return m.bias if value is None else value


def attention_parameters(m: ModelSpec) -> int:
    """Projections of one attention block (and the norms inside it: QK norms, MLA's latent norms)."""
    if not m.has_attention:
        return 0
    h, qkv_bias = m.hidden_size, _bias(m, "qkv_bias")
    out = _linear(m.attn_out_width, h, _bias(m, "attn_out_bias"))
    if m.is_mla:  # DeepSeek-V2 sec. 2.1: low-rank query and joint KV compression, RMSNorm on the latents
        if m.q_lora_rank:
            q = _linear(h, m.q_lora_rank, qkv_bias) + m.q_lora_rank + m.q_lora_rank * m.q_width
        else:
            q = h * m.q_width
        kv = (_linear(h, m.kv_lora_rank + m.qk_rope_head_dim, qkv_bias) + m.kv_lora_rank
              + m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim))
        return q + kv + out
    qkv = _linear(h, m.q_width + 2 * m.kv_dim, qkv_bias)
    qk_norm = {"none": 0, "head": 2 * m.head_dim, "full": m.q_width + m.kv_dim, "l2": 0}[m.qk_norm]
    sinks = m.num_heads if m.attention_sinks else 0  # GPT-OSS: GptOssAttention.sinks, one logit per head
    return qkv + out + norm_parameters(m, qk_norm) + sinks


def dense_ffn_parameters(m: ModelSpec, width: int | None = None) -> int:
    """One dense FFN (or one expert) of ``width`` (default: the dense FFN width)."""
    f, h = width or m.ffn_hidden_size, m.hidden_size
    bias = _bias(m, "ffn_bias")
    up = _linear(h, f, bias) * (2 if m.is_gated_ffn else 1)
    return up + _linear(f, h, bias)


def expert_parameters(m: ModelSpec) -> int:
    """One routed expert."""
    return dense_ffn_parameters(m, m.expert_ffn_hidden_size)


def moe_ffn_parameters(m: ModelSpec, *, active: bool = False) -> int:
    """Router, routed experts (all, or the top-k one token uses), shared experts and their gate."""
    h = m.hidden_size
    routed = m.num_experts_per_token if active else m.num_experts
    shared = m.num_shared_experts * dense_ffn_parameters(m, m.shared_expert_ffn_hidden_size)
    router = _linear(h, m.num_experts, m.router_bias)
    return router + routed * expert_parameters(m) + shared + (h if m.shared_expert_gate else 0)


def _layer_parameters(m: ModelSpec, layer: int, active: bool) -> int:
    if not m.has_attention:  # the seed's FFN-only blocks
        return dense_ffn_parameters(m)
    ffn = moe_ffn_parameters(m, active=active) if m.is_moe_layer(layer) else dense_ffn_parameters(m)
    return attention_parameters(m) + ffn + m.norms_per_layer * norm_parameters(m, m.hidden_size)


def _embedding_parameters(m: ModelSpec) -> int:
    if not m.has_embeddings:
        return 0
    h = m.hidden_size
    total = m.vocab_size * h  # token embedding
    total += m.max_seq_len * h if m.position_embedding == "learned" else 0
    total += norm_parameters(m, h) if m.embedding_norm else 0
    total += norm_parameters(m, h)  # final norm
    return total + (0 if m.tied_embeddings else m.vocab_size * h)  # output layer


def parameter_count(m: ModelSpec, *, active: bool = False) -> int:
    """Parameters of the whole model; ``active``: those one token uses (top-k routed experts)."""
    layers = sum(_layer_parameters(m, i, active) for i in range(m.num_layers))
    return layers + _embedding_parameters(m)
