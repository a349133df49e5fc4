"""A published row stated the way a user states a run: ``autotune evaluate`` flags.

The model becomes a Hugging Face ``config.json`` (Llama for gated-FFN rows, GPT-2 otherwise; a
mixture-of-experts row names its preset), the runtime is ``--runtime`` (the row's framework, dated
where its behaviour changed), and every other flag is one of the row's own cells. Nothing a row
does not state is added: what the runtime does by default is its preset's. ``check-published``
must give the same prediction (tests/test_stated_rows.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from autotune.calibrate.modern import (GPU_CLUSTERS, MOE_PRESETS, framework_of, runtime_name_of, runtime_of_row,
                                      stated_plan_options)
from autotune.calibrate.nemo_recipes import fp8_params_of, fp8_recipe_of, grad_reduce_in_fp32_of
from autotune.calibrate.row_cells import normalized_row

__all__ = ["stated_argv", "model_config"]


def model_config(row: dict[str, str], legacy_dropout: bool) -> dict:
    """The row's model columns as a Hugging Face config (what a user of the run has)."""
    act = {"relu2": "relu"}.get(row["ffn_act"] or "gelu", row["ffn_act"] or "gelu")
    heads, kv = int(row["heads"]), int(row.get("kv_heads") or row["heads"])
    common = {"vocab_size": int(row.get("vocab") or 51200), "num_hidden_layers": int(row["layers"])}
    if act == "swiglu":
        return {"model_type": "llama", "hidden_size": int(row["hidden"]), "num_attention_heads": heads,
                "num_key_value_heads": kv, "intermediate_size": int(row["ffn"]), "hidden_act": "silu",
                "max_position_embeddings": int(row["seq"]), "tie_word_embeddings": False, "rope_theta": 10000.0,
                **common}
    return {"model_type": "gpt2", "n_embd": int(row["hidden"]), "n_head": heads, "n_inner": int(row["ffn"]),
            "n_layer": common["num_hidden_layers"], "vocab_size": common["vocab_size"], "n_positions": int(row["seq"]),
            "activation_function": {"gelu": "gelu_new", "relu": "relu"}[act],
            "resid_pdrop": 0.1 if legacy_dropout else 0.0, "attn_pdrop": 0.1 if legacy_dropout else 0.0}


def _model_arg(row: dict[str, str], runtime: str, config_dir: Path) -> str:
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    if row.get("arch") == "moe" and key is not None:
        return MOE_PRESETS[key]
    path = config_dir / f"{row['id']}.json"
    path.write_text(json.dumps(model_config(row, runtime in ("megatron-2019", "megatron-2021") or "framework" not in row)))
    return str(path)


def _cells(row: dict[str, str], framework: str) -> list[str]:
    """Flags of the cells the row gives (an empty cell gives none: the runtime's default)."""
    out: list[str] = []
    pipelined_split = framework == "torchtitan" and int(row["pp"]) > 1  # its micro-batch cell is the local batch
    for cell, flag in (("tp", "--tp"), ("pp", "--pp"), ("dp", "--dp"), ("cp", "--cp"), ("ep", "--ep"), ("vpp", "--vpp"),
                       ("micro_batch", "" if pipelined_split else "--micro-batch"), ("zero", "--zero"),
                       ("recompute", "--recompute"),
                       ("ep_dispatcher", "--ep-dispatcher"), ("cuda_graph_scope", "--cuda-graph-scope")):
        if row.get(cell) and flag:
            value = row[cell] if cell != "cuda_graph_scope" else ",".join(row[cell].split())
            out += [flag, value]
    if row.get("recompute_modules"):
        out += ["--recompute-modules", ",".join(row["recompute_modules"].split())]
    if row.get("sequence_parallel"):
        out.append("--sequence-parallel" if row["sequence_parallel"] == "yes" else "--no-sequence-parallel")
    if row.get("ep_overlap") == "yes":
        out.append("--overlap-ep-comm")
    return out


def stated_argv(row: dict[str, str], config_dir: Path, *, cells_only: bool = False) -> list[str] | str:
    """``autotune evaluate`` arguments stating ``row`` (its cells, normalised), or why it cannot be stated.
    ``cells_only``: the columns alone, as the held-out rows are stated (no settings its source's text or
    its NeMo recipe give: those take the runtime preset's defaults)."""
    checked, why = normalized_row(row, tuple(GPU_CLUSTERS))
    if checked is None:
        return why
    row = checked
    framework = framework_of(row) if "framework" in row else "megatron"
    runtime = runtime_name_of(row, framework)
    cluster = GPU_CLUSTERS.get(row["gpu"])
    if cluster is None:
        return f"no cluster preset for {row['gpu']}"
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    precision = row.get("precision") or row.get("dtype") or "bf16"
    if precision == "fp8" and "rowwise" in text:
        precision = "fp8_rowwise"
    argv = ["evaluate", "--model", _model_arg(row, runtime, config_dir), "--gpus", row["gpus"], "--cluster", cluster,
            "--global-batch", row["global_batch"], "--seq-len", row["seq"], "--dtype", precision,
            "--runtime", runtime, *_cells(row, framework), *([] if cells_only else _source_flags(row, framework, text))]
    return argv + ["--json"]


def _source_flags(row: dict[str, str], framework: str, text: str) -> list[str]:
    """What the row's source says the run used beyond its cells (async TP, interleaving, TP overlap,
    compile, FP8 all-gathers) and what its NeMo recipe, named by its release and container, sets."""
    out: list[str] = []
    options = stated_plan_options(row, framework, int(row["tp"]))
    if options.get("overlap_tp_backward") is False:
        out.append("--async-tp")
    elif options.get("overlap_tp_comm") is False:
        out.append("--no-overlap-tp-comm")
    if "framework" not in row and int(row["tp"]) > 1 and not _is_sc21(row):
        out.append("--overlap-tp-comm")  # the Megatron-LM README's --tp-comm-overlap for these runs
    if not row.get("vpp") and framework == "torchtitan" and int(row["pp"]) > 1 and "interleaved" in row["source"].lower():
        out += ["--vpp", "2"]
    if framework == "torchtitan" and (row.get("compile") or "").lower() == "yes":
        out.append("--compile")
    if "fp8 all-gather on" in text:
        out.append("--fp8-all-gather")
    if options.get("activation_offload_layers"):
        out += ["--activation-offload-layers", str(options["activation_offload_layers"])]
    if options.get("recompute_modules") and not row.get("recompute_modules"):
        out += ["--recompute-modules", ",".join(options["recompute_modules"])]
    if framework == "nemo":
        out += _nemo_recipe_flags(row, framework)
    return out


def _nemo_recipe_flags(row: dict[str, str], framework: str) -> list[str]:
    precision = row.get("precision") or "bf16"
    out = ["--grad-reduce", "fp32" if grad_reduce_in_fp32_of(row, framework) else "bf16"]
    if precision in ("fp8", "mxfp8", "nvfp4"):  # the FP8 flags act only under an FP8 recipe (else refused)
        out += ["--fp8-recipe", fp8_recipe_of(row, framework)]
    if precision in ("fp8", "mxfp8"):
        out.append("--fp8-params" if fp8_params_of(row, framework, precision) else "--no-fp8-params")
    recipe = runtime_of_row(row, framework, precision)
    if recipe.ep_dispatcher != "alltoall" and not row.get("ep_dispatcher"):
        out += ["--ep-dispatcher", recipe.ep_dispatcher]
    if recipe.overlap_ep_comm and not row.get("ep_overlap"):
        out.append("--overlap-ep-comm")
    if recipe.cuda_graph_scope and not row.get("cuda_graph_scope"):
        out += ["--cuda-graph-scope", ",".join(recipe.cuda_graph_scope)]
    return out


def _is_sc21(row: dict[str, str]) -> bool:
    return row["source"].startswith("Narayanan et al. SC'21")
