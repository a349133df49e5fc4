"""Mixtures of experts in torchtitan 0.3: which config function builds the model, and expert parallelism.

Read from the torchtitan 0.3.0 package (PyPI):

- Models: ``models/qwen3/__init__.py`` (flavour ``30B-A3B``: 48 layers, dim 2048, 32/4 heads of 128,
  128 experts of 768, top-8, softmax router with top-k renormalised, RoPE base 1e6) and
  ``models/deepseek_v3/__init__.py`` (``16B`` and ``671B``: latent attention, shared experts, the
  first layers dense). Their config functions (``config_registry.py``) are ``qwen3_30b_a3b``,
  ``deepseek_v3_16b`` and ``deepseek_v3_671b``; a flavour without a config function (Qwen3
  235B-A22B, DeepSeek 236B) cannot be named with ``--config``. There is no Mixtral or OLMoE model.
- ``parallelism.expert_parallel_degree`` (config/configs.py) is the only expert option; 0.3 has no
  expert tensor parallel degree. With ep > 1 the experts live on the sparse mesh
  ``[pp, dp_replicate, efsdp, ep]``: ep borrows ranks from dp_shard x cp x tp ("dp_shard * cp *
  tp == efsdp * ep"), the experts are not tensor-parallel, and FSDP shards them over efsdp. With
  ep = 1 and tp > 1 the experts are tensor-parallel over tp (models/common/moe_sharding.py,
  ``expert_param_placement_dense``).
"""

from __future__ import annotations

from autotune.outputs.export.common import ExportContext, refuse
from autotune.spec.model import ModelSpec

__all__ = ["MOE_CONFIGS", "moe_config", "expert_parallelism"]

NAME = "torchtitan"
# config function -> (module, flavour, the spec fields that flavour builds), from the files above.
_SHAPE = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "vocab_size", "num_experts",
          "num_experts_per_token", "expert_ffn_hidden_size", "num_shared_experts", "first_k_dense_layers",
          "kv_lora_rank", "q_lora_rank", "router", "router_scaling_factor", "router_groups", "router_group_topk")
MOE_CONFIGS: dict[str, tuple[str, str, tuple]] = {
    "qwen3_30b_a3b": ("qwen3", "30B-A3B", (48, 2048, 32, 4, 151936, 128, 8, 768, 0, 0, 0, 0, "topk_softmax",
                                           1.0, 0, 0)),
    "deepseek_v3_16b": ("deepseek_v3", "16B", (27, 2048, 16, 16, 102400, 64, 6, 1408, 2, 1, 512, 0, "softmax_topk",
                                               1.0, 0, 0)),
    "deepseek_v3_671b": ("deepseek_v3", "671B", (61, 7168, 128, 128, 129280, 256, 8, 2048, 1, 3, 512, 1536,
                                                "sigmoid_topk", 2.5, 8, 4)),
}


def moe_config(model: ModelSpec) -> tuple[str, str]:
    """(module, config function) of the torchtitan MoE model of ``model``'s shape; refuses others."""
    shape = tuple(getattr(model, name) for name in _SHAPE)
    for function, (module, _, expected) in MOE_CONFIGS.items():
        if shape == expected:
            return module, function
    known = ", ".join(f"{module} {flavour} ({function})" for function, (module, flavour, _) in MOE_CONFIGS.items())
    raise refuse(NAME, "model", f"its mixtures of experts are fixed flavours with config functions: {known}; "
                                f"{model.name} ({model.num_experts} experts top-{model.num_experts_per_token}, "
                                f"{model.num_layers} layers, hidden {model.hidden_size}) is none of them")


def expert_parallelism(ctx: ExportContext, dp_shard: int) -> dict:
    """``parallelism.expert_parallel_degree``, after checking the plan's expert layout is torchtitan's."""
    s = ctx.stage
    if s.ep > 1 and s.etp != 1:
        raise refuse(NAME, "stages.etp", f"with ep > 1 its experts are not tensor-parallel (0.3 has no expert "
                                         f"tensor parallel degree); the plan has etp={s.etp}")
    if s.ep == 1 and s.etp != s.tp:
        raise refuse(NAME, "stages.etp", f"with ep = 1 its experts are tensor-parallel over tp={s.tp}; "
                                         f"the plan has etp={s.etp}")
    region = dp_shard * s.cp * s.tp  # the ranks ep borrows from (ParallelismConfig.expert_parallel_degree)
    if region % s.ep:
        raise refuse(NAME, "stages.ep", f"ep={s.ep} must divide dp_shard x cp x tp = {dp_shard}x{s.cp}x{s.tp} "
                                        "(expert parallelism borrows FSDP and TP ranks; replicated DP is outside)")
    return {"expert_parallel_degree": s.ep}
