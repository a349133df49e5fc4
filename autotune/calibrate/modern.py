"""Modern published runs (``tests/data/modern_runs.csv``): FSDP, FP8, MoE, newer GPUs.

Each row names its framework; where a cell is empty the framework's defaults are assumed, once
per framework, as ``FRAMEWORK_DEFAULTS`` states them (calibrate/framework_defaults.py: setting,
value, reason). A row the cost model cannot price yet is returned as :class:`Unexpressible` with
the reason, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from autotune.calibrate.deepspeed_2021 import deepspeed_2021_calls
from autotune.calibrate.framework_defaults import (DEEPSPEED_2021_GATHER_BYTES_PER_S, EAGER_ELEMENTWISE,  # noqa: F401
                                                   FRAMEWORK_DEFAULTS, WEIGHT_CAST_REUSERS)
from autotune.calibrate.framework_kernels import ATTENTION_KERNEL_SPEED  # noqa: F401
from autotune.calibrate.nemo_recipes import (NEMO_NO_TP_OVERLAP_PRECISIONS, embedding_loss_slots, fp8_recipe_of,
                                             low_precision_tp_gathers, with_embedding_loss_slots)
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset
from autotune.spec.workload import TrainingWorkload

__all__ = ["FRAMEWORK_DEFAULTS", "GPU_CLUSTERS", "ATTENTION_KERNEL_SPEED", "EAGER_ELEMENTWISE", "Unexpressible", "runs_eager", "framework_of", "modern_run_from_row"]


# Which cluster preset (or shipped cluster) each GPU column names.
GPU_CLUSTERS = {
    "A100-40GB": "dgx-a100-40gb", "A100-80GB": "dgx-a100-80gb", "A100-SXM4-80GB": "dgx-a100-80gb",
    "H100-80GB": "dgx-h100", "H100-SXM5-80GB": "dgx-h100", "H200": "dgx-h200",
    "H100-96GB-HBM2e-500W": "grand-teton-h100", "B200": "dgx-b200", "GB200": "gb200-nvl72-64",
}


@dataclass(frozen=True, kw_only=True)
class Unexpressible:
    """A published row the cost model cannot price (yet), and why."""

    run_id: str
    regime: str
    reason: str


def runs_eager(row: dict[str, str]) -> bool:
    """Whether the row ran eager PyTorch elementwise kernels (torchtitan without torch.compile)."""
    return framework_of(row) == "torchtitan" and (row.get("compile") or "no").lower() != "yes"


def framework_of(row: dict[str, str]) -> str:
    name = row.get("framework", "").lower()
    for key in FRAMEWORK_DEFAULTS:
        if key in name:
            return key
    return "megatron" if not name else name.split()[0]


# The CSV's shape columns cannot say a mixture-of-experts model's attention and layer details
# (head_dim other than hidden / heads, latent attention, shared experts, dense first layers,
# sliding windows, biases). Rows naming one of these models take them from its preset, whose
# source is the model's own config.json; the row's own columns must agree with the preset.
# The published Model TFLOP/s confirm the preset shapes: Qwen3-30B-A3B's 547 TFLOP/s at 23766
# tokens/s/GPU (nemo-mb-042) is 23.0 GFLOP per token, 6 x 79.9 M per layer with head_dim 128
# (62 M with hidden / heads = 64).
MOE_PRESETS = {"qwen3_30b_a3b": "qwen3-30b-a3b", "qwen3_235b_a22b": "qwen3-235b-a22b",
               "deepseekv3": "deepseek-v3", "gpt oss 120b": "gpt-oss-120b"}
_PRESET_CHECKS = ("hidden_size", "num_heads", "num_kv_heads", "vocab_size", "num_experts",
                  "num_experts_per_token", "expert_ffn_hidden_size")


# MoE settings of NeMo / Megatron-Bridge performance recipes the table does not print:
# (container, gpu, model key) -> (ep_dispatcher, overlap_ep_comm, source). Unlisted: alltoall,
# no overlap (Megatron-Core's defaults: moe_token_dispatcher_type alltoall, overlap off).
NEMO_MOE_RECIPES = {
    ("25.09", "H100-SXM5-80GB", "deepseekv3"): (
        "deepep", True, "Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py: DeepEP on H100 and "
        "A2A_1F1B (overlap_moe_expert_parallel_comm, delay_wgrad_compute) on H100"),
    ("25.11", "H100-SXM5-80GB", "qwen3_30b_a3b"): (
        "alltoall", True, "Megatron-Bridge v0.2.0 scripts/performance/configs/qwen3/workload_base_configs.py "
        "QWEN3_30B_A3B_H100_*: moe_a2a_overlap=True"),
    ("25.11", "B200", "qwen3_235b_a22b"): (
        "alltoall", True, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_235B_A22B_B200_*: moe_a2a_overlap=True"),
    ("25.11", "GB200", "qwen3_30b_a3b"): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_30B_A3B_GB200_*: moe_flex_dispatcher_backend=hybridep"),
    ("25.11", "GB200", "qwen3_235b_a22b"): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_235B_A22B_GB200_*: moe_flex_dispatcher_backend=hybridep"),
    ("25.11", "GB200", "deepseekv3"): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/deepseek/workload_base_configs.py "
        "DEEPSEEK_V3_GB200_BASE_CONFIG: hybridep, moe_a2a_overlap=False"),
    ("26.04.01", "B200", "gpt oss 120b"): (
        "deepep", False, "Megatron-Bridge 26.04 configs/gpt_oss/gpt_oss_workload_base_configs.py "
        "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 (GBS 1280): hybridep"),
    ("26.08", "GB200", "gpt oss 120b"): (
        "deepep", False, "Megatron-Bridge @067f987 perf_recipes/gpt_oss/gb200/gpt_oss.py "
        "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config: HybridEP (NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 64)"),
}


# CUDA graphs of the NeMo / Megatron-Bridge MoE performance recipes (cost/host.py removes the
# host time of a captured scope): (container, gpu, model key) -> (cuda_graph_scope, source).
# Unlisted: no graphs. 25.09's graphs are Megatron-Core's per-layer local graphs
# (enable_cuda_graph) of token-drop runs, padded to capacity: every scope of the layer.
_LAYER = ("attn", "mlp", "moe_router", "moe_preprocess", "moe")
NEMO_CUDA_GRAPHS = {
    ("25.09", "GB200", "qwen3_30b_a3b"): (_LAYER, "Megatron-Bridge v0.1.0rc4 configs/qwen3/"
                                          "qwen3_30b_a3b_llm_pretrain.yaml gb200: cuda_graphs true"),
    ("25.09", "B200", "qwen3_30b_a3b"): (_LAYER, "v0.1.0rc4 qwen3_30b_a3b_llm_pretrain.yaml b200: cuda_graphs true"),
    ("25.09", "GB200", "qwen3_235b_a22b"): (_LAYER, "v0.1.0rc4 qwen3_235b_a22b_llm_pretrain.yaml gb200: cuda_graphs true"),
    ("25.11", "GB200", "qwen3_30b_a3b"): (("moe_router", "moe_preprocess"), "Megatron-Bridge v0.2.0 configs/qwen3/"
                                          "workload_base_configs.py QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG"),
    ("25.11", "GB200", "qwen3_235b_a22b"): (("attn", "moe_router", "moe_preprocess"),
                                            "v0.2.0 configs/qwen3/workload_base_configs.py QWEN3_235B_A22B_GB200_*"),
    ("25.11", "GB200", "deepseekv3"): (("moe_router", "moe_preprocess"),
                                       "v0.2.0 configs/deepseek/workload_base_configs.py DEEPSEEK_V3_GB200_BASE_CONFIG"),
    ("26.08", "GB200", "gpt oss 120b"): (("full_iteration",), "Megatron-Bridge @067f987 perf_recipes/gpt_oss/common.py "
                                         "_apply_gpt_oss_120b_full_iter_fp8mx_configs: cuda_graph_impl full_iteration"),
}


# Megatron-Core modules the NeMo / Megatron-Bridge MoE performance recipes recompute
# (recompute_granularity selective with recompute_modules; cost/recompute_modules.py):
# (container, gpu, model key) -> (modules, source). Unlisted: none (the Qwen3 MoE recipes set
# recompute_granularity None: v0.1.0rc4 configs/qwen3/*_llm_pretrain.yaml, v0.2.0
# configs/qwen3/qwen3_llm_pretrain.py).
NEMO_RECOMPUTE_MODULES = {
    ("25.09", "H100-SXM5-80GB", "deepseekv3"): (
        ("mla_up_proj", "mlp"), "Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py:90-91 (h100), "
        "configs/deepseek/deepseek_v3_llm_pretrain.yaml:22 recompute_granularity selective"),
    ("25.11", "GB200", "deepseekv3"): (
        ("mla_up_proj",), "Megatron-Bridge v0.2.0 scripts/performance/configs/deepseek/workload_base_configs.py "
        "DEEPSEEK_V3_GB200_BASE_CONFIG; deepseek_llm_pretrain.py:37 selective"),
    ("26.04", "B200", "deepseekv3"): (
        ("mla_up_proj",), "Megatron-Bridge @067f987 perf_recipes/deepseek/b200/deepseek_v3.py:229 "
        "deepseek_v3_pretrain_256gpu_b200_fp8mx_large_scale_config (pp 16, ep 8)"),
    ("26.04.01", "B200", "gpt oss 120b"): (
        ("layernorm", "moe_act"), "Megatron-Bridge @067f987 perf_recipes/gpt_oss/b200/gpt_oss.py:39-40 "
        "gpt_oss_120b_pretrain_64gpu_b200_bf16_config"),
    ("26.04.01", "H100-SXM5-80GB", "gpt oss 120b"): (
        ("layernorm", "moe_act"), "Megatron-Bridge @067f987 perf_recipes/gpt_oss/h100/gpt_oss.py:39-40 "
        "gpt_oss_120b_pretrain_64gpu_h100_bf16_config"),
    # 26.08 GB200 GPT-OSS: gb200/gpt_oss.py:240-241 sets recompute_modules = [] after its full-iteration
    # CUDA graph settings, so nothing is recomputed (unlisted)
}


def _recipe_key(row: dict[str, str]) -> tuple:
    """(container, gpu, model key) of a NeMo row, as the recipe tables above are keyed."""
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    return match.group(1) if match else "", row["gpu"], next((k for k in MOE_PRESETS if name.startswith(k)), None)


def _recompute_modules(row: dict[str, str], framework: str) -> tuple:
    """The row's recipe's recomputed modules (NEMO_RECOMPUTE_MODULES) where its recompute cell is empty."""
    if framework != "nemo" or row.get("arch") != "moe" or row["recompute"]:
        return ()
    entry = NEMO_RECOMPUTE_MODULES.get(_recipe_key(row))
    return entry[0] if entry else ()


def _host_settings(row: dict[str, str], framework: str) -> dict:
    """Megatron-Core rows issue kernels from eager PyTorch (cost/host.py), outside the CUDA
    graphs a NeMo MoE recipe captures (NEMO_CUDA_GRAPHS)."""
    if framework not in ("nemo", "megatron"):
        return {}
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    graphs = NEMO_CUDA_GRAPHS.get((match.group(1) if match else "", row["gpu"], key)) if row.get("arch") == "moe" else None
    return {"host_dispatch": "eager", "cuda_graph_scope": graphs[0] if graphs else ()}


def _moe_recipe(row: dict[str, str]) -> dict:
    """Workload fields of the row's NeMo MoE recipe (NEMO_MOE_RECIPES); empty when unlisted."""
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    recipe = NEMO_MOE_RECIPES.get((match.group(1) if match else "", row["gpu"], key))
    if recipe is None or row.get("arch") != "moe":
        return {}
    return {"ep_dispatcher": recipe[0], "overlap_ep_comm": recipe[1]}


def _moe_preset(row: dict[str, str], columns: ModelSpec) -> ModelSpec:
    """The preset the row's model names (see MOE_PRESETS), with the row's name, source and
    context; the row's columns when it names none."""
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    if row.get("arch") != "moe" or key is None:
        return columns
    preset = load_preset(MOE_PRESETS[key])
    differ = [f for f in _PRESET_CHECKS if getattr(preset, f) != getattr(columns, f)]
    if differ or preset.num_layers != columns.num_layers:
        raise AutotuneError("model", f"row {row['id']} disagrees with preset {preset.name} on {differ or ['num_layers']}")
    return preset.with_changes(name=columns.name, source=columns.source, max_seq_len=columns.max_seq_len)


def _model(row: dict[str, str], framework: str) -> ModelSpec:
    act = {"relu2": "relu"}.get(row["ffn_act"] or "gelu", row["ffn_act"] or "gelu")
    llama = act == "swiglu"
    moe = row.get("arch") == "moe"
    vocab = int(row["vocab"] or 51200)
    return ModelSpec(
        name=row["model"], num_layers=int(row["layers"]), hidden_size=int(row["hidden"]),
        num_heads=int(row["heads"]), num_kv_heads=int(row["kv_heads"] or row["heads"]),
        ffn_hidden_size=int(row["ffn"]), ffn_activation=act, vocab_size=vocab,
        max_seq_len=int(row["seq"]), tied_embeddings=not llama, dropout=False,
        norm="rmsnorm" if llama else "layernorm", bias=not llama,
        position_embedding="rotary" if llama else "learned", source=row["source"],
        num_experts=int(row["num_experts"]) if moe else 0,
        num_experts_per_token=int(row["top_k"]) if moe else 0,
        expert_ffn_hidden_size=int(row["expert_ffn"]) if moe else 0,
    )


def _precision(row: dict[str, str]) -> str:
    return row.get("precision") or row.get("dtype") or "bf16"


def regime_of(row: dict[str, str]) -> str:
    return f"{row['gpu']} | {row.get('arch') or 'dense'} | {_precision(row)} | {framework_of(row)}"




def _plan_options(row: dict[str, str], framework: str, pp: int, tp: int) -> dict:
    """Plan fields the framework's defaults decide."""
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    zero = int(row["zero"]) if row["zero"] else (3 if framework in ("llm-foundry", "torchtitan", "meta") else 1)
    async_tp = (("asynctp" in text.replace(" ", "") or "async tp" in text or _captioned_async_tp(text))
                and "vanilla tp" not in text)
    nemo_overlap = framework == "nemo" and _precision(row) not in NEMO_NO_TP_OVERLAP_PRECISIONS
    options = {"zero": zero, "overlap_grad_reduce": True, "overlap_param_gather": True, "overlap_p2p_comm": True,
               "overlap_tp_comm": tp > 1 and (nemo_overlap or async_tp)}
    if framework == "meta":  # FSDP without resharding after forward (FRAMEWORK_DEFAULTS)
        options["reshard_after_forward"] = False
    if framework == "torchtitan":
        options["overlap_tp_backward"] = False  # PyTorch async TP decomposes the forward graph's collectives
        options["reshard_after_forward"] = pp == 1
        options["cp_comm"] = "all_gather"
    return options


# Tables whose caption, not their rows, says the runs used async TP: the December 2024 page's
# Table 5 ("3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP") and Table 6
# ("4D parallelism ... + AsyncTP + 1F1B"), pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md.
ASYNC_TP_CAPTIONS = {"llama3_h100_202412_torchtitan.md": ("table5", "table6")}


def _captioned_async_tp(text: str) -> bool:
    return any(page in text and any(f"{table} " in text or text.endswith(table) for table in tables)
               for page, tables in ASYNC_TP_CAPTIONS.items())


def _schedule(row: dict[str, str], framework: str, pp: int) -> tuple[int, str | None]:
    """(vpp, schedule): the row's vpp; torchtitan's interleaved tables and Meta's runs at 2 stages per rank."""
    if row["vpp"]:
        vpp = int(row["vpp"])
        return vpp, ("interleaved" if vpp > 1 else None)
    if pp > 1 and (framework == "meta" or (framework == "torchtitan" and "interleaved" in row["source"].lower())):
        return 2, "interleaved"
    return 1, None


def _deepspeed_2021(row: dict[str, str], framework: str) -> bool:
    """A DeepSpeed row of 2021 (its source or framework says 2021, SC'21, or release 0.3-0.5)."""
    text = " ".join(row.get(k, "") for k in ("source", "framework", "confidence")).lower()
    return framework == "deepspeed" and bool(re.search(r"2021|sc'?21|\b0\.[345]\.\d", text))


def modern_run_from_row(row: dict[str, str]):
    """(model, workload, cluster name, plan) of one modern row, or an Unexpressible."""
    framework = framework_of(row)
    regime = regime_of(row)
    if not row.get("iter_s"):
        return Unexpressible(run_id=row["id"], regime=regime, reason="no iteration time (the source gave only TFLOP/s)")
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    cluster = GPU_CLUSTERS.get(row["gpu"])
    if cluster is None:
        return Unexpressible(run_id=row["id"], regime=regime, reason=f"no cluster preset for {row['gpu']}")
    model = _moe_preset(row, _model(row, framework))
    tp, pp, cp = int(row["tp"]), int(row["pp"]), int(row["cp"] or 1)
    vpp, schedule = _schedule(row, framework, pp)
    slots = embedding_loss_slots(model.num_layers, pp * vpp, framework)
    if model.num_layers % (pp * vpp) and not slots:  # rounded up (see FRAMEWORK_DEFAULTS)
        model = model.with_changes(num_layers=-(-model.num_layers // (pp * vpp)) * pp * vpp)
    tp, pp, cp = int(row["tp"]), int(row["pp"]), int(row["cp"] or 1)
    gpus = int(row["gpus"])
    dp = int(row["dp"]) if row["dp"] else gpus // (tp * pp * cp)
    global_batch = int(row["global_batch"])
    micro_batch = int(row["micro_batch"] or 1)
    if framework == "torchtitan" and pp > 1:  # one micro-batch per stage
        micro_batch = max(1, global_batch // dp // pp)
    dtype = "fp8_rowwise" if _precision(row) == "fp8" and "rowwise" in text else _precision(row)
    of_2021 = _deepspeed_2021(row, framework)
    workload = TrainingWorkload(global_batch=global_batch, seq_len=int(row["seq"]), dtype=dtype,
                                attention_impl="unfused" if of_2021 else "flash",
                                fp8_all_gather="fp8 all-gather on" in text, sp_batch_first=framework == "torchtitan",
                                fp8_tp_all_gather=low_precision_tp_gathers(framework, dtype, tp),
                                qkv_fused=framework != "torchtitan", kv_heads_expanded=framework == "torchtitan",
                                reuse_weight_casts=framework in WEIGHT_CAST_REUSERS,
                                fp8_recipe=fp8_recipe_of(row, framework),
                                param_gather_bytes_per_s=DEEPSPEED_2021_GATHER_BYTES_PER_S if of_2021 else 0.0,
                                **(deepspeed_2021_calls(model, tp, True) if of_2021 else {}),
                                **(_moe_recipe(row) if framework == "nemo" else {}), **_host_settings(row, framework))
    sp = row["sequence_parallel"] == "yes" if row["sequence_parallel"] else tp > 1
    plan = uniform_plan(
        num_layers=model.num_layers + slots, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, micro_batch=micro_batch,
        global_batch=global_batch, sequence_parallel=sp, recompute=row["recompute"] or "none",
        schedule=schedule, ep=int(row.get("ep") or 1), **_plan_options(row, framework, pp, tp))
    if slots:
        plan = with_embedding_loss_slots(plan)
    if modules := _recompute_modules(row, framework):  # the recipe's selective modules
        plan = plan.with_changes(stages=tuple(replace(s, recompute_modules=modules) for s in plan.stages))
    if framework == "torchtitan" and plan.stages[0].recompute == "selective":  # its op-level policy
        plan = plan.with_changes(stages=tuple(replace(s, recompute="selective_op") for s in plan.stages))
    return model, workload, cluster, plan, regime


def safe_modern_run(row: dict[str, str]):
    """As :func:`modern_run_from_row`, a row the specs reject becoming Unexpressible."""
    try:
        return modern_run_from_row(row)
    except AutotuneError as err:
        return Unexpressible(run_id=row["id"], regime=regime_of(row), reason=f"{err.field}: {err.message}")
