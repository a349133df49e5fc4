"""Write the operator streams autotune prices the ``torch`` and ``transformers`` runtimes with.

For each architecture below, build the runtime's own model at the capture sizes
(profilers/opstream.py CAPTURE: two decoder layers, every size a distinct prime), run one
training step's forward and backward under the emulated bf16 CUDA autocast, and write
``autotune/data/opstreams/<name>.json``: per block (``embedding``, ``layer``: the second decoder
layer, ``head``: final norm, LM head and loss) every kernel with its class, its bytes, FLOPs,
saved bytes and parameters as sums of monomials of the model's sizes, and the bytes alive at each
kernel. autotune/graph/opstream.py reads them (no torch at plan time).

Run: ``python -m profilers.opstreams [--out DIR]`` (needs transformers for the transformers
streams; the versions are recorded in each file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from profilers.opstream import CAPTURE, Capture, capture_step

__all__ = ["STREAMS", "stream_json", "write_streams"]

OUT = Path(__file__).resolve().parent.parent / "autotune" / "data" / "opstreams"
SCHEMA = "autotune.opstream/1"

# A kernel's module scope (its last name) -> the cost model's operator name (graph/operators.py),
# so recomputed modules, early stop and TP overlap find the operators they name.
CANONICAL = {"q_proj": "q_proj", "wq": "q_proj", "k_proj": "k_proj", "wk": "k_proj", "v_proj": "v_proj",
             "wv": "v_proj", "o_proj": "out_proj", "wo": "out_proj", "gate_proj": "ffn_up", "up_proj": "ffn_up",
             "w1": "ffn_up", "w3": "ffn_up", "down_proj": "ffn_down", "w2": "ffn_down",
             "input_layernorm": "attn_norm", "attention_norm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "ffn_norm": "ffn_norm", "act_fn": "ffn_act", "mlp": "ffn_act", "feed_forward": "ffn_act",
             "q_norm": "qk_norm", "k_norm": "qk_norm", "self_attn": "attention", "attention": "attention",
             "norm": "final_norm", "lm_head": "logits", "output": "logits", "embed_tokens": "token_embedding",
             "tok_embeddings": "token_embedding", "pos_embeddings": "position_embedding",
             "gate": "router", "experts": "experts"}  # transformers' MoE blocks: mlp.gate routes, mlp.experts
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj", "ffn_up", "ffn_down", "logits")


def _merge(terms) -> list:
    """Sum like monomials: [[constant, {symbol: exponent}], ...] in a stable order."""
    total: dict[tuple, int] = {}
    for const, powers in terms:
        key = tuple(sorted(powers.items()))
        total[key] = total.get(key, 0) + const
    return [[c, dict(k)] for k, c in sorted(total.items()) if c]


def _name(kernel: dict, last_forward: bool) -> str:
    """The operator name of a kernel: its module's (a GEMM of a projection keeps the bare name,
    other kernels there are '<name>.cast' etc.); the layer's last forward kernel is the FFN residual."""
    scope = kernel["scope"].split(".")[-1] if kernel["scope"] else ""
    name = CANONICAL.get(scope, "")
    if kernel["class"] in ("attention", "attention_bwd"):
        return "attention"
    if kernel["class"] == "activation":
        return "ffn_act"
    if name in _PROJECTIONS and kernel["class"] != "gemm":
        return f"{name}.{kernel['class']}"
    if not name:
        return "ffn_residual" if last_forward else ("loss" if kernel["class"] == "softmax" else kernel["class"])
    return name


def _block_kernels(capture: Capture, block: str) -> list[dict]:
    index = [i for i, k in enumerate(capture.kernels) if k["block"] == block]
    saved = _saved_by_kernel(capture, block, index)
    last_fwd = max((i for i in index if capture.kernels[i]["phase"] == "fwd"), default=-1)
    out = []
    for i in index:
        k = capture.kernels[i]
        out.append({"name": _name(k, i == last_fwd and block.startswith("layer")), "op": k["op"], "phase": k["phase"],
                    "scope": k["scope"], "class": k["class"], "dtype": k["dtype"], "read": _merge(k["read"]),
                    "written": _merge(k["written"]), "flops": _merge(k["flops"]), "saved": _merge(saved.get(i, [])),
                    "params": _merge(k["params"]), "weight_cast": k["weight_cast"]})
    return out


def _saved_by_kernel(capture: Capture, block: str, index: list[int]) -> dict[int, list]:
    """Saved tensors of the block's nodes, charged to the first forward kernel of the node's scope
    (a fused attention's or norm's to that kernel)."""
    out: dict[int, list] = {}
    forward = [i for i in index if capture.kernels[i]["phase"] == "fwd"]
    for (node_block, scope, node_type), term in capture.saved.values():
        if node_block != block:
            continue
        cls = {"_AttentionBackward": "attention", "_RMSNormBackward": "norm"}.get(node_type)
        match = [i for i in forward if capture.kernels[i]["scope"] == scope
                 and (cls is None or capture.kernels[i]["class"] == cls)]
        out.setdefault(match[0] if match else forward[0], []).append(term)
    return out


def _dominated(p: dict, q: dict) -> bool:
    return all(c <= q.get(k, 0) for k, c in p.items())


def _live(capture: Capture, block: str) -> list:
    """The bytes alive at each of the block's kernels that the block made (weight casts aside:
    the cost model counts those with the weights), less the events every other one dominates."""
    polys = []
    for index, live in capture.events:
        if capture.kernels[index]["block"] != block:
            continue
        total: dict[tuple, int] = {}
        for sid in live:
            entry = capture.storages.get(sid)
            if entry is None or entry[1] != block or entry[3]:
                continue
            const, powers = entry[2]
            key = tuple(sorted(powers.items()))
            total[key] = total.get(key, 0) + const
        polys.append((capture.kernels[index]["phase"], total))
    kept = [(ph, p) for i, (ph, p) in enumerate(polys)
            if not any(j != i and _dominated(p, q) and (p != q or j < i) for j, (_, q) in enumerate(polys))]
    return [{"phase": ph, "bytes": [[c, dict(k)] for k, c in sorted(p.items())]} for ph, p in kept]


def stream_json(name: str, family: str, architecture: dict, capture: Capture, source: str) -> dict:
    versions = {"torch": torch.__version__}
    if family.startswith("transformers"):
        versions["transformers"] = sys.modules["transformers"].__version__
    blocks = {}
    for block, label in (("embedding", "embedding"), ("layer.1", "layer"), ("head", "head")):
        blocks[label] = {"kernels": _block_kernels(capture, block), "live": _live(capture, block)}
    return {"schema": SCHEMA, "name": name, "family": family, "architecture": architecture, "versions": versions,
            "capture": CAPTURE, "source": source, "blocks": blocks}


# -- the models ------------------------------------------------------------------------------------

def _reference(architecture: dict):
    """autotune's reference transformer (autotune/validate/model.py), as ``autotune validate``
    trains it: fp32 weights, the loss of validate/train.py over fp32 logits."""
    from autotune.spec.model import ModelSpec
    from autotune.validate.model import build_model
    c = CAPTURE
    heads = c["g"] * c["r"]
    spec = ModelSpec(name="capture", num_layers=2, hidden_size=heads * 2 * c["d2"], num_heads=heads,
                     num_kv_heads=c["g"], ffn_hidden_size=c["f"], vocab_size=c["v"], max_seq_len=c["s"],
                     **architecture)
    torch.manual_seed(0)
    model = build_model(spec).train()
    tokens = torch.randint(0, c["v"], (c["b"], c["s"] + 1))

    def loss():
        logits = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    return model, list(model.layers.values()), loss, []


def _transformers(kind: str, tied: bool):
    """A Hugging Face model as hf_bench.py trains it: fp32 weights, SDPA, the model's own loss."""
    import importlib

    import transformers
    c = CAPTURE
    heads = c["g"] * c["r"]
    config_cls = getattr(transformers, {"llama": "LlamaConfig", "qwen3": "Qwen3Config", "gemma2": "Gemma2Config"}[kind])
    model_cls = getattr(transformers, {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
                                       "gemma2": "Gemma2ForCausalLM"}[kind])
    cfg = config_cls(hidden_size=c["c"] * heads, intermediate_size=c["f"], num_hidden_layers=2, num_attention_heads=heads,
                     num_key_value_heads=c["g"], head_dim=2 * c["d2"], vocab_size=c["v"], max_position_embeddings=c["s"],
                     tie_word_embeddings=tied, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = model_cls(cfg).train()
    tokens = torch.randint(0, c["v"], (c["b"], c["s"]))
    module = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    return model, list(model.model.layers), lambda: model(input_ids=tokens, labels=tokens, use_cache=False).loss, [module]


def _transformers_prefill(kind: str, tied: bool):
    """The prefill of transformers' ``generate``: bf16 weights, no autocast, no autograd, the
    DynamicCache filled, logits of each sequence's last position only."""
    model, layers, _, patch = _transformers(kind, tied)
    model = model.to(torch.bfloat16).eval()
    c = CAPTURE
    tokens = torch.randint(0, c["v"], (c["b"], c["s"]))
    return model, layers, lambda: model(input_ids=tokens, use_cache=True, logits_to_keep=1).logits, patch


# transformers' MoE models: (config, causal-LM class, module, architecture beyond _LLAMA's). The
# routed experts are the @use_experts_implementation module, which transformers (modeling_utils
# get_correct_experts_implementation) runs as "grouped_mm" where torch has it, as hf_bench.py did.
_MOE = {
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", "olmoe", {"qk_norm": "full", "router": "softmax_topk"}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", "mixtral", {"qk_norm": "none", "router": "topk_softmax"}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3_moe", {"qk_norm": "head", "router": "topk_softmax"}),
}


def _transformers_moe(kind: str):
    """A transformers mixture of experts as hf_bench.py trains it, every layer routed: experts "e",
    top-k "k", expert width "f". OLMoE's head dimension is hidden / heads (its config has no
    head_dim), so its hidden size is heads x 2 d2 there."""
    import importlib

    import transformers
    c = CAPTURE
    heads = c["g"] * c["r"]
    config_name, model_name, module, architecture = _MOE[kind]
    sizes = dict(intermediate_size=c["f"], num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=c["g"],
                 vocab_size=c["v"], max_position_embeddings=c["s"], tie_word_embeddings=False,
                 num_experts_per_tok=c["k"], attn_implementation="sdpa")
    if kind == "olmoe":
        sizes.update(hidden_size=heads * 2 * c["d2"], num_experts=c["e"], norm_topk_prob=False)
    else:
        sizes.update(hidden_size=c["c"] * heads, head_dim=2 * c["d2"], num_local_experts=c["e"])
    if kind == "qwen3_moe":
        sizes.update(moe_intermediate_size=c["f"], norm_topk_prob=architecture["router"] == "topk_softmax")
    cfg = getattr(transformers, config_name)(**sizes)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).train()
    tokens = torch.randint(0, c["v"], (c["b"], c["s"]))
    modules = [importlib.import_module(f"transformers.models.{module}.modeling_{module}")]
    return model, list(model.model.layers), lambda: model(input_ids=tokens, labels=tokens, use_cache=False).loss, modules


_GPT = {"norm": "layernorm", "ffn_activation": "gelu", "position_embedding": "learned", "bias": True,
        "dropout": True, "tied_embeddings": True}
_LLAMA = {"norm": "rmsnorm", "ffn_activation": "swiglu", "position_embedding": "rotary", "bias": False,
          "dropout": False, "tied_embeddings": False}
# what an MoE stream's layer holds: every layer routed, no shared experts or router bias
_MOE_DENSE_PARTS = {"first_k_dense_layers": 0, "moe_layer_frequency": 1, "mlp_only_layers": (), "num_shared_experts": 0,
                    "shared_expert_gate": False, "router_bias": False, "router_expert_bias": False, "router_groups": 0,
                    "expert_act_clamp": 0.0, "kv_lora_rank": 0}
# name -> (family, architecture the stream holds for, builder)
STREAMS = {
    "torch-gpt": ("torch", _GPT, lambda: _reference(_GPT)),
    "torch-llama": ("torch", _LLAMA, lambda: _reference(_LLAMA)),
    "transformers-llama": ("transformers", {**_LLAMA, "qk_norm": "none", "tied_embeddings": True},
                           lambda: _transformers("llama", True)),
    "transformers-llama-untied": ("transformers", {**_LLAMA, "qk_norm": "none"}, lambda: _transformers("llama", False)),
    "transformers-qwen3": ("transformers", {**_LLAMA, "qk_norm": "head"}, lambda: _transformers("qwen3", False)),
    "transformers-qwen3-tied": ("transformers", {**_LLAMA, "qk_norm": "head", "tied_embeddings": True},
                                lambda: _transformers("qwen3", True)),
    # Gemma 2: GeGLU (tanh GELU), a norm before and after attention and FFN, tied embeddings, the
    # config's default attention and final-logit soft-capping (transformers' Gemma2Config)
    "transformers-gemma2": ("transformers", {**_LLAMA, "ffn_activation": "geglu", "qk_norm": "none", "tied_embeddings": True,
                                             "norms_per_layer": 4}, lambda: _transformers("gemma2", True)),
    **{f"transformers-{kind.replace('_', '-')}": ("transformers", {**_LLAMA, **_MOE_DENSE_PARTS, **arch},
                                                 lambda kind=kind: _transformers_moe(kind))
       for kind, (_, _, _, arch) in _MOE.items()},
    # generate's prefill (family "transformers-prefill"): what `--workload prefill|serve` prices
    "transformers-prefill-llama": ("transformers-prefill", {**_LLAMA, "qk_norm": "none", "tied_embeddings": True},
                                   lambda: _transformers_prefill("llama", True)),
    "transformers-prefill-llama-untied": ("transformers-prefill", {**_LLAMA, "qk_norm": "none"},
                                          lambda: _transformers_prefill("llama", False)),
    "transformers-prefill-qwen3": ("transformers-prefill", {**_LLAMA, "qk_norm": "head"},
                                   lambda: _transformers_prefill("qwen3", False)),
    "transformers-prefill-qwen3-tied": ("transformers-prefill", {**_LLAMA, "qk_norm": "head", "tied_embeddings": True},
                                        lambda: _transformers_prefill("qwen3", True)),
    "transformers-prefill-gemma2": ("transformers-prefill", {**_LLAMA, "ffn_activation": "geglu", "qk_norm": "none",
                                                             "tied_embeddings": True, "norms_per_layer": 4},
                                    lambda: _transformers_prefill("gemma2", True)),
}
PREFILL = {name for name, (family, _, _) in STREAMS.items() if family == "transformers-prefill"}


def write_streams(out: Path = OUT, names: list[str] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(STREAMS):
        family, architecture, build = STREAMS[name]
        model, layers, loss, patch = build()
        prefill = name in PREFILL
        capture = capture_step(model, layers, loss, patch=patch, backward=not prefill, autocast=not prefill)
        source = (f"python -m profilers.opstreams: {'autotune validate/model.py' if family == 'torch' else 'transformers'}"
                  " model at the capture sizes, " + ("generate's prefill: one forward, bf16 weights, no autocast, "
                  "DynamicCache filled, last position's logits" if prefill else
                  "one forward and backward under bf16 CUDA autocast (emulated)"))
        path = out / f"{name}.json"
        path.write_text(json.dumps(stream_json(name, family, architecture, capture, source), indent=None) + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("names", nargs="*", help=f"streams to write (default all: {', '.join(STREAMS)})")
    args = parser.parse_args(argv)
    for path in write_streams(args.out, args.names or None):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
