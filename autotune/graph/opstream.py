"""Operator streams: the kernels a runtime's own code issues, captured once and priced as tables.

``profilers/opstreams.py`` runs a runtime's model (autotune's reference transformer for the
``torch`` runtime, transformers' modeling code for ``transformers``) for one training step under
the emulated bf16 CUDA autocast and writes ``autotune/data/opstreams/<name>.json``: per block
(embedding, one decoder layer, head) every kernel with its class and its bytes, FLOPs, saved bytes
and parameters as sums of monomials of the model's sizes (symbols: b micro-batch, s sequence, g KV
heads, r query heads per KV head, c hidden per query head, d2 half the head dimension, f FFN, v
vocabulary), and the bytes alive at each kernel. This module reads them, without torch, and turns
a stream into the cost model's operator tables (graph/table.py) for a given model: one operator
per kernel. A forward kernel is an operator with no backward; a backward kernel is one with no
forward (``kernels`` 0) whose backward is its own amounts. Everything downstream (TP and CP
splits, recomputation, memory) reads those tables as it reads the hand-written graph's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from autotune.data import data_path
from autotune.errors import AutotuneError
from autotune.graph.operator import Operator
from autotune.spec.model import ModelSpec

__all__ = ["StreamMemory", "stream_names", "load_stream", "stream_for", "symbol_values", "stream_operators", "explicit_mask_share",
           "forward_live_bytes",
           "stream_memory", "STREAM_SCHEMA", "KERNEL_CLASSES"]

STREAM_SCHEMA = "autotune.opstream/1"
KERNEL_CLASSES = ("gemm", "attention", "attention_bwd", "norm", "activation", "softmax", "embedding", "cast",
                  "stream", "sync")
# kernel class -> the cost model's operator kind (graph/operator.py OP_KINDS; the kind picks the fit)
_KIND = {"gemm": "gemm", "attention": "attention", "attention_bwd": "attention", "norm": "norm",
         "softmax": "loss", "embedding": "embedding"}
# cuBLAS's fast kernels need every leading dimension a multiple of 16 bytes: 8 bf16/fp16 elements
# (NVIDIA cuBLAS docs, "Tensor Core usage": dimensions and pointers aligned to 16 bytes); the
# stream symbols that are one whole GEMM dimension and can be odd: vocabulary and FFN width
_ALIGN_ELEMENTS = 8
_WIDTHS = ("v", "f")
# tensor-parallel split of an operator by its name (graph/operator.py SHARDINGS)
_SHARDING = {"q_proj": "column", "k_proj": "column", "v_proj": "column", "ffn_up": "column", "logits": "column",
             "out_proj": "row", "ffn_down": "row", "attention": "split", "ffn_act": "split", "qk_norm": "split",
             "loss": "split", "token_embedding": "vocab"}


@lru_cache(maxsize=1)
def _files() -> dict[str, Any]:
    folder = data_path("opstreams")
    return {p.name[:-5]: p for p in folder.iterdir() if p.name.endswith(".json")}


def stream_names() -> list[str]:
    return sorted(_files())


@lru_cache(maxsize=None)
def load_stream(name: str) -> dict:
    files = _files()
    if name not in files:
        raise AutotuneError("op_stream", f"no operator stream {name!r}; known: {', '.join(sorted(files))}")
    data = json.loads(files[name].read_text())
    if data.get("schema") != STREAM_SCHEMA:
        raise AutotuneError("op_stream", f"{name}: schema {data.get('schema')!r}, this version reads {STREAM_SCHEMA!r}")
    return data


def _matches(model: ModelSpec, architecture: dict) -> bool:
    """The model has every field the stream was captured with (JSON lists are the spec's tuples);
    an MoE stream's architecture names its router, a dense one's does not."""
    if ("router" in architecture) != model.is_moe:
        return False
    return all(getattr(model, key) == (tuple(value) if isinstance(value, list) else value)
               for key, value in architecture.items())


def stream_for(model: ModelSpec, family: str) -> str:
    """The captured stream of ``family`` ("torch", "transformers") for this model's architecture,
    or "" when none was captured (a dense decoder whose norm, activation, positions, biases,
    dropout, QK norm and tying match; the reference model also needs hidden = heads x head dim,
    its query width)."""
    if not family or model.layer_kind != "decoder" or model.head_dim % 2:
        return ""
    if family == "torch" and model.hidden_size != model.num_heads * model.head_dim:
        return ""
    for name in stream_names():
        data = load_stream(name)
        if data["family"] == family and _matches(model, data["architecture"]):
            return name
    return ""


def symbol_values(model: ModelSpec, seq_len: int) -> dict[str, float]:
    """The stream's symbols for one sequence of ``model``: b = 1 (amounts per sequence); a mixture
    of experts' (every layer routed) FFN width is its experts', with its top-k and expert count."""
    return {"b": 1.0, "s": float(seq_len), "g": float(model.num_kv_heads),
            "r": model.num_heads / model.num_kv_heads, "c": model.hidden_size / model.num_heads,
            "d2": model.head_dim / 2.0, "v": float(model.vocab_size),
            "f": float(model.expert_ffn_hidden_size if model.is_moe else model.ffn_hidden_size),
            "k": float(model.num_experts_per_token), "e": float(model.num_experts)}


def _value(terms: list, values: dict[str, float], *, per_sequence: bool | None = None) -> float:
    """Sum of ``[constant, {symbol: exponent}]`` terms; ``per_sequence`` True: only the terms
    that scale with the micro-batch (b), False: only those that do not (weights), None: all."""
    total = 0.0
    for const, powers in terms:
        if per_sequence is not None and ("b" in powers) != per_sequence:
            continue
        product = float(const)
        for symbol, exponent in powers.items():
            product *= values[symbol] ** exponent
        total += product
    return total


def _sharding(kernel: dict) -> str:
    name = kernel["name"]
    if name in _SHARDING:
        return _SHARDING[name]
    base = name.split(".")[0]
    if base in _SHARDING and _SHARDING[base] in ("column", "row"):  # a projection's casts and sums
        weights_only = all("b" not in powers for _, powers in kernel["read"] + kernel["written"])
        return _SHARDING[base] if weights_only else ("split" if _SHARDING[base] == "row" else "replicated")
    return "replicated"


def _kind(kernel: dict, values: dict[str, float]) -> str:
    """The operator kind (the fit) of a kernel: a GEMM autocast left in fp32 (transformers' grouped
    expert GEMMs over fp32 weights, RoPE's frequencies) runs at the fp32 line, whatever the step's
    dtype; a 16-bit GEMM over a vocabulary or FFN width that is not a multiple of 8 elements (16
    bytes) is "gemm_unaligned": cuBLAS then runs its align1 kernels (on an H200, cutlass_75
    s1688gemm ..._align1 for GPT-2's 50,257: tests/data/h200/check-2026-11-27/kernel_rates.json)."""
    kind = _KIND.get(kernel["class"], "elementwise")
    if kind != "gemm":
        return kind
    if kernel["dtype"] == "float32":
        return "gemm_fp32"
    dims = {symbol for _, powers in kernel["flops"] for symbol in powers} & set(_WIDTHS)
    return "gemm_unaligned" if any(values[symbol] % _ALIGN_ELEMENTS for symbol in dims) else kind


def _launches(kernel: dict, values: dict[str, float]) -> int:
    """CUDA kernels one captured operator launches. aten._grouped_mm runs one CUTLASS kernel only
    when both inputs and the output are bf16 (on SM90/SM100); otherwise it copies the offsets to
    the host and runs one mm per group (pytorch aten/src/ATen/native/cuda/GroupedBlas.cpp
    _grouped_mm_cuda -> _grouped_mm_fallback, commit 00d4eaf). transformers' experts pass the
    weights of all ``e`` experts as the groups (integrations/moe.py grouped_mm_experts_forward)."""
    if kernel["op"] == "aten._grouped_mm" and kernel["dtype"] != "bfloat16":
        return int(round(values["e"]))
    return 1


def _operator(kernel: dict, values: dict[str, float], head_dim: float) -> Operator:
    """One kernel as an operator: a forward kernel's amounts are its forward, a backward
    kernel's its backward (its forward launches nothing)."""
    act_in = _value(kernel["read"], values, per_sequence=True)
    act_out = _value(kernel["written"], values, per_sequence=True)
    fixed = _value(kernel["read"], values, per_sequence=False) + _value(kernel["written"], values, per_sequence=False)
    flops = _value(kernel["flops"], values)
    kind = _kind(kernel, values)
    launches = _launches(kernel, values)
    forward = kernel["phase"] == "fwd"
    model_flops = 0.0
    if forward and kind in ("gemm", "gemm_fp32", "gemm_unaligned", "attention"):  # causal attention runs half the s x s pairs it counts
        model_flops = flops * (2.0 if kind == "attention" else 1.0)
    common = dict(name=kernel["name"], kind=kind, flops=flops, model_flops=model_flops, act_in_bytes=act_in,
                  act_out_bytes=act_out, sharding=_sharding(kernel), head_dim=head_dim if kind == "attention" else 0.0)
    if forward:
        saved = _value(kernel["saved"], values, per_sequence=True)
        dropped = max(saved - act_in, 0.0) if kernel["class"] == "attention" else 0.0  # its log-sum-exp
        return Operator(**common, weight_bytes=fixed, params=int(round(_value(kernel["params"], values))),
                        saved_bytes=saved, bwd_flops_factor=0.0, bwd_bytes_factor=0.0, kernels=launches, bwd_kernels=0,
                        selective_recompute=kernel["class"] == "attention", selective_dropped_bytes=dropped)
    # backward: the cost model's backward memory term counts weights twice (dW read and written)
    return Operator(**common, weight_bytes=fixed / 2.0, params=0, saved_bytes=0.0,
                    bwd_flops_factor=1.0 if flops else 0.0, bwd_bytes_factor=1.0, kernels=0, bwd_kernels=launches)


_SUMMED = ("flops", "model_flops", "act_in_bytes", "act_out_bytes", "weight_bytes", "params", "saved_bytes",
           "kernels", "bwd_kernels", "selective_dropped_bytes")


def _merged(ops: list[Operator]) -> list[Operator]:
    """Kernels of one operator name, kind, split and pass as one operator (first occurrence's
    place): their times add exactly (each class sits on one side of the roofline: the fit's
    latency times the kernel count plus the summed amounts), and the tables stay a few dozen
    operators long for the search."""
    groups: dict[tuple, list[Operator]] = {}
    for op in ops:
        groups.setdefault((op.name, op.kind, op.sharding, op.kernels > 0, op.bwd_flops_factor > 0), []).append(op)
    out = []
    for members in groups.values():
        first = members[0]
        sums = {f: sum(getattr(m, f) for m in members) for f in _SUMMED}
        out.append(replace(first, **sums))
    return out


def stream_operators(name: str, block: str, model: ModelSpec, seq_len: int, masked_share: float = 0.0) -> list[Operator]:
    """The operators of ``block`` ("embedding", "layer", "head") of stream ``name`` for ``model``;
    ``masked_share``: the share of the layers whose attention kernels get an explicit mask."""
    values = symbol_values(model, seq_len)
    ops = [_operator(k, values, float(model.head_dim)) for k in load_stream(name)["blocks"][block]["kernels"]]
    if masked_share:
        ops = [replace(op, masked_share=masked_share) if op.kind == "attention" else op for op in ops]
    return _merged(ops)


def explicit_mask_share(model: ModelSpec, seq_len: int) -> float:
    """The share of ``model``'s layers to which transformers' SDPA path passes a mask tensor, not
    is_causal: the windowed layers (sliding or chunked) whose window is no longer than the sequence
    (transformers 5.17 masking_utils._ignore_causal_mask_sdpa: "local_attention_size is not None and
    kv_length >= local_attention_size" keeps the mask). Gemma 2 at 4,096 tokens: its 13 sliding
    layers (tests/data/h200/check-2026-11-27b/gpu_check.json traces)."""
    if not model.sliding_window or seq_len < model.sliding_window:
        return 0.0
    return model.windowed_share


@dataclass(frozen=True, kw_only=True)
class StreamMemory:
    """What the captured step held beyond the tables' saved bytes, per sequence and fixed
    (weight-sized) bytes: the layer's input (all a fully recomputed layer keeps), the peak bytes
    alive beyond the layer's saved ones during its backward, and the head's (final norm, LM head,
    loss) bytes alive at each of its kernels, which the cost model takes the largest of. Under
    autocast the 16-bit weights are casts each forward makes and saves (fixed bytes per micro-batch),
    not a copy the runtime keeps: they count here, not as weights."""

    layer_input_bytes: float
    layer_saved_fixed_bytes: float  # kept for backward per micro-batch whatever its size: autocast's weight casts
    head_saved_fixed_bytes: float
    layer_backward_extra: tuple[tuple[float, float], ...]  # (per sequence, fixed) per backward kernel
    head_live_forward: tuple[tuple[float, float], ...]  # (per sequence, fixed) per head forward kernel
    head_live_backward: tuple[tuple[float, float], ...]
    head_saved_bytes: float  # per sequence


def _live_pairs(block: dict, values: dict[str, float], phase: str | None = None,
                less: float = 0.0) -> tuple[tuple[float, float], ...]:
    return tuple((_value(e["bytes"], values, per_sequence=True) - less, _value(e["bytes"], values, per_sequence=False))
                 for e in block["live"] if phase is None or e["phase"] == phase)


@lru_cache(maxsize=256)
def forward_live_bytes(name: str, model: ModelSpec, seq_len: int) -> tuple[float, float]:
    """(per sequence, fixed) bytes alive at the busiest kernel of one layer's forward, with the
    layer's input (made before it): the temporary memory of an inference forward (a prefill)."""
    values = symbol_values(model, seq_len)
    layer = load_stream(name)["blocks"]["layer"]
    first = next(k for k in layer["kernels"] if k["phase"] == "fwd")
    layer_input = max(_value([t], values) for t in first["read"] if "b" in t[1])
    per_seq, fixed = max(_live_pairs(layer, values, "fwd"), key=lambda pair: pair[0])
    return per_seq + layer_input, fixed


@lru_cache(maxsize=256)
def stream_memory(name: str, model: ModelSpec, seq_len: int) -> StreamMemory:
    values = symbol_values(model, seq_len)
    blocks = load_stream(name)["blocks"]
    layer, head = blocks["layer"], blocks["head"]
    saved = sum(_value(k["saved"], values, per_sequence=True) for k in layer["kernels"])
    first = next(k for k in layer["kernels"] if k["phase"] == "fwd")
    head_saved = sum(_value(k["saved"], values, per_sequence=True) for k in head["kernels"])
    fixed = {name: sum(_value(k["saved"], values, per_sequence=False) for k in blocks[name]["kernels"])
             for name in ("layer", "head")}
    return StreamMemory(layer_input_bytes=max(_value([t], values) for t in first["read"] if "b" in t[1]),
                        layer_saved_fixed_bytes=fixed["layer"], head_saved_fixed_bytes=fixed["head"],
                        layer_backward_extra=_live_pairs(layer, values, "bwd", less=saved),
                        head_live_forward=_live_pairs(head, values, "fwd"),
                        head_live_backward=_live_pairs(head, values, "bwd"), head_saved_bytes=head_saved)
