"""Two details of Hugging Face configs that change numerics, not sizes: how a router weights the
experts it picks, and how RoPE frequencies are scaled for long context.

Routers, as transformers 5.x builds them (models/*/modeling_*.py):

- Mixtral: softmax over all experts, top-k, the k probabilities renormalised (always).
- Qwen2-MoE, Qwen3-MoE, OLMoE: softmax, top-k, renormalised only with ``norm_topk_prob`` (default
  false in all three config classes; the published Qwen3-MoE configs set it true).
- DeepSeek-V2: softmax, top-k (greedy, or group-limited with ``topk_method``), never renormalised,
  times ``routed_scaling_factor`` (default 1.0).
- DeepSeek-V3 (and Kimi K2, its code): sigmoid, a score-correction bias for selection only, group-limited top-k
  (``n_group``/``topk_group``, default 8/4), renormalised with ``norm_topk_prob`` (default true),
  times ``routed_scaling_factor`` (default 2.5).
- GLM-4.5 (Glm4MoeTopkRouter): DeepSeek-V3's, defaults ``routed_scaling_factor`` 1.0 and one group.
- MiniMax-M2 (MiniMaxM2TopKRouter): sigmoid, a score-correction bias for selection only, top-k,
  always renormalised, no scaling factor, no groups.
- GPT-OSS: top-k of the (biased) logits, softmax over those (GptOssTopKRouter).
- Llama 4: top-k of the logits, each the sigmoid of its own, scaling the expert's input
  (Llama4Router, Llama4TextMoe).

Softmax then top-k then renormalise equals top-k of the logits then softmax over those (softmax is
monotonic and the renormalisation cancels the partition function): the spec's ``topk_softmax``.

RoPE scaling: ``rope_scaling`` (4.x; ``type`` or ``rope_type``) or ``rope_parameters`` (5.x)
with the keys of transformers' modeling_rope_utils.py: ``factor``, ``original_max_position_embeddings``,
``low_freq_factor``/``high_freq_factor`` (llama3), ``beta_fast``/``beta_slow``/``mscale``/
``mscale_all_dim`` (yarn; mscale 1 and mscale_all_dim 0 are its defaults' equivalent; ``truncate``
false, GPT-OSS: the correction range is not rounded to integers).
"""

from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.spec.hf_reader import ConfigReader

__all__ = ["router_fields", "rope_scaling_fields"]

Fields = dict[str, object]


def router_fields(r: ConfigReader, model_type: str) -> Fields:
    """The spec's router fields for an MoE config of ``model_type``."""
    if model_type in ("mixtral", "gpt_oss"):
        return {"router": "topk_softmax"}
    if model_type in ("llama4", "llama4_text"):
        return {"router": "topk_sigmoid"}
    if model_type in ("qwen2_moe", "qwen3_moe", "olmoe"):
        return {"router": "topk_softmax" if r.bool("norm_topk_prob", False) else "softmax_topk"}
    if model_type == "deepseek_v2":
        method = r.str("topk_method", default="greedy")
        if method not in ("greedy", "group_limited_greedy"):
            raise AutotuneError("config.topk_method", f"{method!r} is not supported; supported: greedy, "
                                                      "group_limited_greedy")
        out: Fields = {"router": "softmax_topk", "router_scaling_factor": _scale(r, 1.0)}
        return {**out, **_groups(r)} if method == "group_limited_greedy" else out
    if model_type == "minimax_m2":  # MiniMaxM2TopKRouter: renormalised always, no scaling factor, no groups
        return {"router": "sigmoid_topk", "router_expert_bias": True}
    if model_type == "glm4_moe":  # Glm4MoeTopkRouter: DeepSeek-V3's, with its own defaults (scale 1, one group)
        if not r.bool("norm_topk_prob", True):
            raise AutotuneError("config.norm_topk_prob", "sigmoid routing without renormalising the top-k weights "
                                                         "is not supported (the GLM-4.5 releases renormalise: true)")
        return {"router": "sigmoid_topk", "router_scaling_factor": _scale(r, 1.0), "router_expert_bias": True,
                **_groups(r, default_groups=1, default_topk=1)}
    if model_type in ("deepseek_v3", "kimi_k2"):
        if not r.bool("norm_topk_prob", True):
            raise AutotuneError("config.norm_topk_prob", "sigmoid routing without renormalising the top-k weights "
                                                         "is not supported (DeepSeek-V3 renormalises: true)")
        return {"router": "sigmoid_topk", "router_scaling_factor": _scale(r, 2.5), "router_expert_bias": True,
                **_groups(r, default_groups=8, default_topk=4)}
    raise AutotuneError("config.model_type", f"no router semantics known for {model_type!r}")


def _scale(r: ConfigReader, default: float) -> float:
    return r.float("routed_scaling_factor", default=default, positive=True)


def _groups(r: ConfigReader, *, default_groups: int = 0, default_topk: int = 0) -> Fields:
    groups, chosen = r.int("n_group", default=default_groups), r.int("topk_group", default=default_topk)
    if groups <= 1:  # one group: plain top-k
        return {}
    return {"router_groups": groups, "router_group_topk": chosen}


_KINDS = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}


def _scaling_table(r: ConfigReader) -> ConfigReader:
    nested = r.nested("rope_parameters")  # 5.x: rope_theta and the scaling in one table
    if nested.has("rope_type", "type"):
        return nested
    old = r.data.get("rope_scaling")
    if old is not None and not isinstance(old, dict):
        raise AutotuneError("config.rope_scaling", f"must be an object (rope_type, factor, ...) or null, got {old!r:.60}")
    return r.nested("rope_scaling")


def rope_scaling_fields(r: ConfigReader, *, max_positions: int) -> Fields:
    """The spec's RoPE scaling fields (none when the config has no scaling)."""
    s = _scaling_table(r)
    kind = s.str("rope_type", "type", default="default", choices=tuple(_KINDS))
    if kind == "default":
        return {}
    # transformers takes factor >= 1 (modeling_rope_utils warns below it); the spec refuses less
    out: Fields = {"rope_scaling": _KINDS[kind], "rope_scaling_factor": s.float("factor", default=1.0, positive=True)}
    if kind == "llama3":
        out.update(rope_low_freq_factor=s.float("low_freq_factor", default=1.0, positive=True),
                   rope_high_freq_factor=s.float("high_freq_factor", default=4.0, positive=True),
                   rope_original_max_positions=s.int("original_max_position_embeddings", default=8192))
    elif kind == "yarn":
        out.update(_yarn(s, max_positions))
    return out


def _yarn(s: ConfigReader, max_positions: int) -> Fields:
    if s.has("attention_factor"):
        raise AutotuneError(s.field("attention_factor"), "yarn with an explicit attention_factor is not supported "
                                                         "(factor, beta_fast/slow, mscale/mscale_all_dim, truncate are)")
    original = s.int("original_max_position_embeddings", default=max_positions)
    if original <= 0:
        raise AutotuneError(s.field("original_max_position_embeddings"), f"must be a positive integer, got {original}")
    # transformers' _compute_yarn_parameters: beta_fast or 32, beta_slow or 1 (0 and null take the default)
    fast = s.float("beta_fast", default=0.0) or 32.0
    slow = s.float("beta_slow", default=0.0) or 1.0
    if not 0 < slow <= fast:
        raise AutotuneError(s.field("beta_fast"), f"must be at least beta_slow > 0 (the ramp's bounds in rotations), "
                                                  f"got beta_fast {fast} and beta_slow {slow}")
    both = bool(s.data.get("mscale")) and bool(s.data.get("mscale_all_dim"))  # else transformers uses mscale 1 over 0
    return {"rope_original_max_positions": original,
            "rope_scaling_factor": s.float("factor", default=max_positions / original, positive=True),
            "rope_beta_fast": fast, "rope_beta_slow": slow,
            "rope_mscale": s.float("mscale", default=1.0) if both else 1.0,
            "rope_mscale_all_dim": s.float("mscale_all_dim", default=0.0) if both else 0.0,
            "rope_yarn_truncate": s.bool("truncate", True)}
