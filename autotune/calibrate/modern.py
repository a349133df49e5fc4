"""Modern published runs (``tests/data/modern_runs.csv``): FSDP, FP8, MoE, newer GPUs.

Each row names its framework; where a cell is empty the framework's defaults are assumed, once
per framework, as ``FRAMEWORK_DEFAULTS`` states them (calibrate/framework_defaults.py: setting,
value, reason). A row the cost model cannot price yet is returned as :class:`Unexpressible` with
the reason, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.calibrate.framework_defaults import FRAMEWORK_DEFAULTS
from autotune.calibrate.nemo_moe_recipes import (NEMO_CUDA_GRAPHS, NEMO_MOE_RECIPES, NEMO_NO_TP_OVERLAP,  # noqa: F401
                                                 NEMO_RECOMPUTE_MODULES)
from autotune.calibrate.nemo_recipes import (NEMO_ACTIVATION_OFFLOAD, fp8_recipe_of,
                                             fp8_params_of, grad_reduce_in_fp32_of)
from autotune.errors import AutotuneError, require_positive
from autotune.plan.runtime_plan import runtime_plan
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime, load_runtime, runtime_names
from autotune.spec.workload import TrainingWorkload

__all__ = ["FRAMEWORK_DEFAULTS", "GPU_CLUSTERS", "Unexpressible", "framework_of", "modern_run_from_row",
           "runtime_of_row", "runtime_name_of"]


# Which cluster preset (or shipped cluster) each GPU column names.
GPU_CLUSTERS = {
    "A100-40GB": "dgx-a100-40gb", "A100-80GB": "dgx-a100-80gb", "A100-SXM4-80GB": "dgx-a100-80gb",
    "H100-80GB": "dgx-h100", "H100-SXM5-80GB": "dgx-h100", "H200": "dgx-h200",
    "H100-96GB-HBM2e-500W": "grand-teton-h100", "B200": "dgx-b200", "GB200": "gb200-nvl72-64",
    "V100-SXM3-32GB": "dgx-2", "V100-SXM2-32GB": "dgx-1-v100", "V100-SXM2-16GB": "dgx-1-v100-16gb",
}


@dataclass(frozen=True, kw_only=True)
class Unexpressible:
    """A published row the cost model cannot price (yet), and why."""

    run_id: str
    regime: str
    reason: str


# Other names of the frameworks above: Composer is llm-foundry's trainer (MosaicML); Megatron-LM and
# Megatron-Core rows that do not say NeMo run Megatron's own defaults ("megatron", the legacy rows').
_FRAMEWORK_ALIASES = (("composer", "llm-foundry"), ("mosaic", "llm-foundry"), ("megatron", "megatron"))


def framework_of(row: dict[str, str]) -> str:
    name = row.get("framework", "").lower()
    for key in FRAMEWORK_DEFAULTS:
        if key in name:
            return key
    for alias, key in _FRAMEWORK_ALIASES:
        if alias in name:
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


# The recipe tables NEMO_MOE_RECIPES, NEMO_CUDA_GRAPHS and NEMO_RECOMPUTE_MODULES, with their sources and
# the container -> Megatron-Bridge release mapping, live in calibrate/nemo_moe_recipes.py.


def _recipe_key(row: dict[str, str]) -> tuple:
    """(container, gpu, model key) of a NeMo row, as the recipe tables are keyed."""
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    return match.group(1) if match else "", row["gpu"], next((k for k in MOE_PRESETS if name.startswith(k)), None)


def _recompute_modules(row: dict[str, str], framework: str) -> tuple:
    """The row's recipe's recomputed modules (NEMO_RECOMPUTE_MODULES) where its recompute cell is empty."""
    if framework != "nemo" or row.get("arch") != "moe" or row["recompute"]:
        return ()
    entry = NEMO_RECOMPUTE_MODULES.get(_recipe_key(row))
    return entry[0] if entry else ()


def activation_offload_layers(row: dict[str, str], framework: str, pp: int) -> int:
    """The row's recipe's offloaded layers (nemo_recipes.NEMO_ACTIVATION_OFFLOAD) for a single-stage plan; else 0."""
    if framework != "nemo" or pp != 1 or row["recompute"]:
        return 0
    entry = NEMO_ACTIVATION_OFFLOAD.get((_recipe_key(row)[0], row["gpu"], row["model"], _precision(row)))
    return entry[0] if entry else 0


def _cuda_graph_scope(row: dict[str, str]) -> tuple:
    """The CUDA-graph scopes a NeMo MoE recipe captures (NEMO_CUDA_GRAPHS); () elsewhere."""
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    graphs = NEMO_CUDA_GRAPHS.get((match.group(1) if match else "", row["gpu"], key)) if row.get("arch") == "moe" else None
    return graphs[0] if graphs else ()


def stated_settings(row: dict[str, str]) -> dict:
    """Workload fields a row states in its optional cells (row_cells.LISTED_CELLS, ep_overlap), which
    take precedence over a framework recipe's: for MoE runs whose source gives its command line."""
    out: dict = {}
    if row.get("ep_dispatcher"):
        out["ep_dispatcher"] = row["ep_dispatcher"]
    if row.get("ep_overlap"):
        out["overlap_ep_comm"] = row["ep_overlap"] == "yes"
    if row.get("cuda_graph_scope"):
        out["cuda_graph_scope"] = tuple(row["cuda_graph_scope"].split())
    return out


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
    if differ or columns.num_layers > preset.num_layers or columns.num_layers <= preset.first_k_dense_layers:
        raise AutotuneError("model", f"row {row['id']} disagrees with preset {preset.name} on "
                            f"{differ or ['num_layers']}")
    # fewer layers than the preset: a shortened proxy of the model (its dense first layers kept)
    require_positive("seq", columns.max_seq_len)
    if columns.max_seq_len > preset.max_seq_len:
        raise AutotuneError("seq", f"row {row['id']}: {columns.max_seq_len} tokens exceed {preset.name}'s {preset.max_seq_len}")
    return preset.with_changes(name=columns.name, source=columns.source, num_layers=columns.num_layers)


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




def stated_plan_options(row: dict[str, str], framework: str, tp: int) -> dict:
    """Plan options the row states beyond its runtime's defaults: async TP (its source or its table's
    caption says so), and what its NeMo recipe sets (no TP overlap, offloaded layers, recomputed modules)."""
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    options: dict = {}
    if tp > 1 and ("asynctp" in text.replace(" ", "") or "async tp" in text or _captioned_async_tp(text)) \
            and "vanilla tp" not in text:
        options.update(overlap_tp_comm=True, overlap_tp_backward=False)  # PyTorch async TP: the forward only
    if framework == "nemo" and row.get("arch") == "moe" and _recipe_key(row) in NEMO_NO_TP_OVERLAP:
        options["overlap_tp_comm"] = False
    pp = int(row["pp"])
    if offload := activation_offload_layers(row, framework, pp):  # the recipe's cpu_offloading_num_layers
        options["activation_offload_layers"] = offload
    if modules := tuple(row.get("recompute_modules", "").split()) or _recompute_modules(row, framework):
        options["recompute_modules"] = modules
    return options


# Tables whose caption, not their rows, says the runs used async TP: the December 2024 page's
# Table 5 ("3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP") and Table 6
# ("4D parallelism ... + AsyncTP + 1F1B"), pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md.
ASYNC_TP_CAPTIONS = {"llama3_h100_202412_torchtitan.md": ("table5", "table6")}


def _captioned_async_tp(text: str) -> bool:
    return any(page in text and any(f"{table} " in text or text.endswith(table) for table in tables)
               for page, tables in ASYNC_TP_CAPTIONS.items())


def _vpp(row: dict[str, str], framework: str, pp: int) -> int | None:
    """The row's vpp; 2 on torchtitan's tables whose source says interleaved; else the runtime's (None)."""
    if row["vpp"]:
        return int(row["vpp"])
    if pp > 1 and framework == "torchtitan" and "interleaved" in row["source"].lower():
        return 2
    return None


def _deepspeed_2021(row: dict[str, str], framework: str) -> bool:
    """A DeepSpeed row of 2021 (its source or framework says 2021, SC'21, or release 0.3-0.5)."""
    text = " ".join(row.get(k, "") for k in ("source", "framework", "confidence")).lower()
    return framework == "deepspeed" and bool(re.search(r"2021|sc'?21|\b0\.[345]\.\d", text))


def megatron_legacy(row: dict[str, str], framework: str) -> bool:
    """A Megatron-LM row of 2019-2021 (its source or framework says 2019, 2020, 2021 or SC'21). The code
    of that time (Megatron-LM @ebbe40cd36, Oct 2019: megatron/mpu/transformer.py, model/distributed.py)
    ran attention unfused (scores, softmax and dropout in eager PyTorch), dropout after attention and
    MLP, and all-reduced the gradients after the backward pass (the overlapping hook is commented
    out); tensor-parallel and pipeline communication were not overlapped either (Narayanan et al.
    SC'21 sec. 4; the legacy rows of published_runs.csv are priced the same way)."""
    text = " ".join(row.get(k, "") for k in ("source", "framework")).lower()
    return framework == "megatron" and bool(re.search(r"\b20(19|20|21)\b|sc'?21", text))


def megatron_eager_mask(row: dict[str, str], framework: str) -> bool:
    """A Megatron-LM row of 2019: that code scaled Q and K and masked the scores with eager kernels before
    a separate softmax; its fused scale-mask-softmax came on 2020-09-11 (commit 51a2e6b0ff), so the
    2020-2021 rows (SC'21) ran fused (spec.workload.ATTENTION_IMPLS "unfused_eager_mask")."""
    text = " ".join(row.get(k, "") for k in ("source", "framework")).lower()
    return framework == "megatron" and bool(re.search(r"\b2019\b", text))


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
    legacy = megatron_legacy(row, framework)
    if legacy:
        model = model.with_changes(dropout=True)
    tp, pp, cp = int(row["tp"]), int(row["pp"]), int(row["cp"] or 1)
    vpp = _vpp(row, framework, pp)
    gpus, global_batch = int(row["gpus"]), int(row["global_batch"])
    dtype = "fp8_rowwise" if _precision(row) == "fp8" and "rowwise" in text else _precision(row)
    runtime = runtime_of_row(row, framework, dtype)
    workload = TrainingWorkload(global_batch=global_batch, seq_len=int(row["seq"]), dtype=dtype,
                                attention_impl=runtime.attention_impl)
    pipelined_split = runtime.pipeline_microbatches == "stages" and pp > 1  # its micro-batch cell is the local batch
    model, plan = runtime_plan(
        runtime, model, gpus=gpus, global_batch=global_batch, dtype=dtype, tp=tp, pp=pp, cp=cp, vpp=vpp,
        dp=int(row["dp"]) if row["dp"] else None, micro_batch=None if pipelined_split else int(row["micro_batch"] or 1),
        zero=int(row["zero"]) if row["zero"] else None, recompute=row["recompute"] or "none",
        sequence_parallel=row["sequence_parallel"] == "yes" if row["sequence_parallel"] else None,
        ep=int(row.get("ep") or 1), **stated_plan_options(row, framework, tp))
    return model, workload, runtime, cluster, plan, regime


def runtime_name_of(row: dict[str, str], framework: str) -> str:
    """The runtime preset a row ran on: its framework, dated where that framework's behaviour changed."""
    if megatron_eager_mask(row, framework):
        return "megatron-2019"
    if megatron_legacy(row, framework):
        return "megatron-2021"
    if _deepspeed_2021(row, framework):
        return "deepspeed-2021"
    return framework if framework in runtime_names() else "megatron"


def runtime_of_row(row: dict[str, str], framework: str, dtype: str) -> Runtime:
    """The row's runtime preset with what the row's own cells (and its recipe, named by its source)
    set: FP8 all-gathers, torch.compile, NeMo's releases before Megatron-Bridge, MoE recipes."""
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    runtime = load_runtime(runtime_name_of(row, framework))
    changes: dict = {}
    if "fp8 all-gather on" in text:
        changes["fp8_all_gather"] = True
    if framework == "torchtitan" and (row.get("compile") or "no").lower() == "yes":
        changes["eager_elementwise"] = False  # Inductor fuses norms and activations
    if framework == "nemo":
        changes.update(fp8_recipe=fp8_recipe_of(row, framework), grad_reduce_in_fp32=grad_reduce_in_fp32_of(row, framework),
                       fp8_params=fp8_params_of(row, framework, dtype), **_moe_recipe(row))
        changes["cuda_graph_scope"] = _cuda_graph_scope(row)
    changes.update(stated_settings(row))
    return runtime.with_changes(**changes) if changes else runtime


def safe_modern_run(row: dict[str, str]):
    """As :func:`modern_run_from_row`, a row the specs reject becoming Unexpressible."""
    try:
        return modern_run_from_row(row)
    except AutotuneError as err:
        return Unexpressible(run_id=row["id"], regime=regime_of(row), reason=f"{err.field}: {err.message}")
