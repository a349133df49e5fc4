"""Read a Hugging Face ``config.json`` (GPT-2, GPT-NeoX, BLOOM and Llama key styles)."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.spec.model import ModelSpec

__all__ = ["model_from_hf_config", "model_from_hf_dict"]

# The first key present wins; each tuple lists the spellings the supported families use.
_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads"),
    "vocab_size": ("vocab_size",),
    "num_kv_heads": ("num_key_value_heads",),
    "ffn_hidden_size": ("intermediate_size", "n_inner", "ffn_hidden_size"),
    "max_seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
}
_REQUIRED = object()
_ACTIVATIONS = {"silu": "swiglu", "swiglu": "swiglu", "relu": "relu"}


def model_from_hf_config(path: Path) -> ModelSpec:
    """Parse the file at ``path``; unreadable or malformed files raise :class:`AutotuneError`."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise AutotuneError("model", f"cannot read config file {str(path)!r}: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AutotuneError("model", f"{str(path)!r} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise AutotuneError("model", f"{str(path)!r} must hold a JSON object of config keys")
    return model_from_hf_dict(data, name=Path(path).stem if Path(path).stem != "config" else Path(path).parent.name or "config")


def _get(data: dict, field: str, default: object = _REQUIRED) -> int:
    """The first of ``field``'s keys present (not null), an integer; ``default`` when none is."""
    for key in _KEYS[field]:
        value = data.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise AutotuneError(f"config.{key}", f"must be an integer, got {value!r}")
            return value
    if default is not _REQUIRED:
        return default  # type: ignore[return-value]
    raise AutotuneError("model", f"config.json has no {field} (expected one of: {', '.join(_KEYS[field])})")


def _family(data: dict) -> str:
    model_type = str(data.get("model_type", "")).lower()
    if model_type in {"gpt2", "gpt_neox", "bloom", "llama", "mistral", "qwen2"}:
        return model_type
    if "n_embd" in data or "n_layer" in data:
        return "gpt2"
    return "llama" if "num_key_value_heads" in data else "gpt_neox"


def model_from_hf_dict(data: dict, *, name: str = "config") -> ModelSpec:
    """Build a spec from an already-parsed config dict."""
    family = _family(data)
    hidden = _get(data, "hidden_size")
    heads = _get(data, "num_heads")
    act_name = str(data.get("hidden_act", data.get("activation_function", "gelu"))).lower()
    activation = _ACTIVATIONS.get(act_name, "gelu")
    if family in {"llama", "mistral", "qwen2"}:
        activation = "swiglu"
    ffn = _get(data, "ffn_hidden_size", 4 * hidden)  # GPT-2 and BLOOM leave it implicit: 4 x hidden
    max_seq = _get(data, "max_seq_len", 2048)  # BLOOM (ALiBi) has no position limit: 2048
    tied_default = family in {"gpt2", "bloom"}
    return ModelSpec(
        name=str(data.get("_name_or_path") or name).split("/")[-1] or name,
        num_layers=_get(data, "num_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=_get(data, "num_kv_heads", heads),
        ffn_hidden_size=ffn,
        ffn_activation=activation,
        vocab_size=_get(data, "vocab_size"),
        max_seq_len=max_seq,
        tied_embeddings=bool(data.get("tie_word_embeddings", tied_default)),
        norm="rmsnorm" if family in {"llama", "mistral", "qwen2"} else "layernorm",
        bias=family in {"gpt2", "gpt_neox", "bloom"},
        position_embedding={"gpt2": "learned", "bloom": "alibi"}.get(family, "rotary"),
        source=f"Hugging Face config.json ({family} key style)",
    )
