"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`, by its ``model_type``.

The families and the keys each reads live in :mod:`autotune.spec.hf_families` (and the 2025 ones,
GPT-OSS, Llama 4 and Gemma 3, in :mod:`autotune.spec.hf_families_recent`; GLM-4.5, MiniMax-M2 and
Kimi K2 in :mod:`autotune.spec.hf_families_moe`); this module reads
the file, type-checks every value it takes (a wrong type names its key), and refuses model types
it does not know (encoder-decoders, state-space models, ...) with the list of those it does.
"""

from __future__ import annotations

from pathlib import Path

from autotune.errors import AutotuneError
from autotune.spec.json_file import check_tree, read_json_file
from autotune.spec.hf_families import FAMILIES as _FAMILIES
from autotune.spec.hf_families_moe import MOE_FAMILIES
from autotune.spec.hf_families_recent import RECENT_FAMILIES, WRAPPERS, text_view
from autotune.spec.hf_reader import ConfigReader
from autotune.spec.hf_rope_router import rope_scaling_fields, router_fields
from autotune.spec.model import MAX_NAME_CHARS, ModelSpec

__all__ = ["ConfigReader", "model_from_hf_config", "model_from_hf_dict", "supported_model_types"]

FAMILIES = {**_FAMILIES, **RECENT_FAMILIES, **MOE_FAMILIES}


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Parse the file at ``path`` (a regular file of JSON, every number finite: read by
    autotune.plan.json_file); unreadable or malformed files raise :class:`AutotuneError`."""
    data = read_json_file(path, "model", root="config")
    if not isinstance(data, dict):
        raise AutotuneError("model", f"{str(path)!r} must hold a JSON object of config keys, got {type(data).__name__}")
    stem = Path(path).stem
    return model_from_hf_dict(data, name=stem if stem != "config" else Path(path).parent.name or "config")


def model_from_hf_dict(data: dict, *, name: str = "config") -> ModelSpec:
    """Build a spec from an already-parsed config dict (checked as a file's would be: finite
    numbers, bounded nesting)."""
    if not isinstance(data, dict):
        raise AutotuneError("config", f"must be a dict of config keys, got {type(data).__name__}")
    check_tree(data, "config", name)
    model_type = data.get("model_type")
    supported = ", ".join(supported_model_types())
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        what = "no model_type" if model_type is None else f"{model_type!r:.60} is not supported"
        kind = _unsupported_kind(data)
        raise AutotuneError("config.model_type", f"{what}{kind}; supported: {supported}")
    reader = ConfigReader(text_view(data, model_type))
    fields = FAMILIES[model_type](reader)
    if fields.get("position_embedding") == "rotary":
        fields.update(rope_scaling_fields(reader, max_positions=int(fields["max_seq_len"])))
    if fields.get("num_experts"):
        fields.update(router_fields(reader, model_type))
    fields["fp8_block_scaled"] = _fp8_block_scaled(data)
    text_only = "; its text model only, the vision tower and projector not counted" if model_type in WRAPPERS else ""
    return ModelSpec(name=_label(data, name), source=f"Hugging Face config.json (model_type {model_type}){text_only}",
                     **fields)


def _fp8_block_scaled(data: dict) -> bool:
    """Whether the checkpoint stores FP8 weights with per-block scales (quantization_config quant_method
    "fp8" with a weight_block_size, as DeepSeek-V3/R1's and Kimi K2's: [128, 128])."""
    quant = data.get("quantization_config")
    return isinstance(quant, dict) and quant.get("quant_method") == "fp8" and bool(quant.get("weight_block_size"))


def _label(data: dict, name: str) -> str:
    """The model's name: the last part of ``_name_or_path`` (else the file's), at most
    MAX_NAME_CHARS characters."""
    given = data.get("_name_or_path")
    label = (given if isinstance(given, str) and given else name).rstrip("/").split("/")[-1] or name
    return label[:MAX_NAME_CHARS] or "config"


def _unsupported_kind(data: dict) -> str:
    if data.get("is_encoder_decoder"):
        return " (an encoder-decoder model; autotune plans decoder-only transformers)"
    if "state_size" in data or "ssm_cfg" in data or "d_state" in data:
        return " (a state-space model; autotune plans transformers)"
    return ""
