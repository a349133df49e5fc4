"""What was understood of a model: one line for people, a dict for ``--json``."""

from __future__ import annotations

from typing import Any

from autotune.spec.model import ModelSpec

__all__ = ["format_count", "architecture_line", "architecture_dict"]


def format_count(n: float) -> str:
    """46702792704 -> '46.7B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(int(n))


def _attention_text(m: ModelSpec) -> list[str]:
    parts = [f"{m.num_heads}/{m.num_kv_heads} heads", f"head_dim {m.head_dim}"]
    if m.is_mla:
        q = f"q rank {m.q_lora_rank}, " if m.q_lora_rank else ""
        parts[1:] = [f"latent attention ({q}kv rank {m.kv_lora_rank}, rope {m.qk_rope_head_dim}, "
                     f"nope {m.qk_nope_head_dim}, v {m.v_head_dim})"]
    if m.sliding_window:
        every = "" if m.sliding_window_every == 1 else f" on 1 of every {m.sliding_window_every} layers"
        if m.full_attention_every:
            every = f" except 1 of every {m.full_attention_every} layers"
        kind = "chunks of" if m.window_kind == "chunked" else "window"
        parts.append(f"{kind} {m.sliding_window}{every}")
    if m.attention_sinks:
        parts.append("attention sinks")
    return parts


def _experts_text(m: ModelSpec) -> str:
    text = f"{m.num_experts} experts top-{m.num_experts_per_token} (width {m.expert_ffn_hidden_size})"
    if m.num_shared_experts:
        text += f" + {m.num_shared_experts} shared"
    if m.num_moe_layers != m.num_layers:
        text += f" in {m.num_moe_layers} of {m.num_layers} layers"
    return text


def architecture_line(m: ModelSpec) -> str:
    """e.g. 'mixtral-8x7b: 32 layers, hidden 4096, 32/8 heads, head_dim 128, 8 experts top-2
    (width 14336), 46.7B params (12.9B active)'."""
    total = format_count(m.num_parameters())
    if not m.has_attention:
        return (f"{m.name}: {m.num_layers} FFN-only blocks, hidden {m.hidden_size}, FFN {m.ffn_hidden_size}, "
                f"{total} params")
    parts = [f"{m.num_layers} layers", f"hidden {m.hidden_size}", *_attention_text(m)]
    parts.append(_experts_text(m) if m.is_moe else f"FFN {m.ffn_hidden_size}")
    params = f"{total} params"
    if m.is_moe:
        params += f" ({format_count(m.num_active_parameters())} active)"
    return f"{m.name}: {', '.join(parts)}, {params}"


def architecture_dict(m: ModelSpec) -> dict[str, Any]:
    """The parsed architecture for JSON output."""
    return {
        "name": m.name, "num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_heads": m.num_heads,
        "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "ffn_hidden_size": m.ffn_hidden_size,
        "num_experts": m.num_experts, "num_experts_per_token": m.num_experts_per_token,
        "num_moe_layers": m.num_moe_layers, "multi_head_latent_attention": m.is_mla,
        "sliding_window": m.sliding_window, "kv_cache_elements_per_token_per_layer":
        m.kv_cache_elements_per_token_per_layer(), "num_parameters": m.num_parameters(),
        "num_active_parameters": m.num_active_parameters(), "summary": architecture_line(m),
    }
