"""Measure the memory traffic and kernels of Megatron-Core's MoE layer, per part, forward and backward.

cost/moe.py and graph/moe_ops.py price an MoE layer's memory-bound operators by the bytes they
move. This script runs Megatron-Core's ``MoELayer`` (local, non-Transformer-Engine spec, alltoall
dispatcher, SequentialMLP experts) on this machine's CPU (gloo, one rank, CUDA calls stubbed as
in profilers/host_ops.py) under a TorchDispatchMode that records, for every kernel-launching ATen
operator, the bytes of its tensor inputs (read) and outputs (written) and the FLOPs of matmuls,
split into the parts of the layer by the Megatron method running them (forward) or the scope
of the autograd node running them (backward):

* ``router_gemm`` (TopKRouter.gating), ``router_topk`` (TopKRouter.routing without the aux loss),
  ``aux_loss`` (compute_routing_scores_for_aux_loss and the _apply_*aux_loss methods);
* ``preprocess`` (the dispatcher's token counts), ``permute`` (dispatch_preprocess: moe_utils.permute),
  ``a2a`` (token_dispatch / token_combine; one rank: no exchange), ``sort`` (dispatch_postprocess /
  combine_preprocess);
* ``expert_gemm`` (matmuls inside routed_experts_compute) and ``expert_other`` (the rest there:
  activation, the probabilities' multiply, splits and the concatenation of expert outputs);
* ``unpermute`` (combine_postprocess: moe_utils.unpermute) and ``postprocess``.

Fused kernels the recipes turn on (Transformer Engine's permute, the jit-fused weighted SwiGLU, the
fused router) cannot run here; their traffic is reported as the boundary bytes of the function
they replace (its tensor inputs and outputs), measured in the forward.

Bytes are reported per token (they are linear in tokens: two token counts are run and compared).
Run: ``python -m profilers.moe_traffic`` (needs megatron-core).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from profilers import host_ops
from profilers.host_ops import NO_KERNEL, _alive, _in_scope, _scope, _tag, _TagNodes

MATMULS = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._grouped_mm"})
# operators that only read metadata or make a tensor without writing it
NO_TRAFFIC = NO_KERNEL | {"aten.empty_like", "aten.new_empty", "aten._local_scalar_dense", "aten.is_nonzero"}


def _tensors(tree) -> list:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _nbytes(tensors) -> int:
    """Bytes of distinct tensors, each at most its storage (an expanded index is read once)."""
    seen, total = set(), 0
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if key not in seen:
            seen.add(key)
            total += min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
    return total


def _matmul_flops(name: str, args, out) -> float:
    if name not in MATMULS:
        return 0.0
    a = [t for t in _tensors(args) if t.dim() >= 2]
    o = _tensors(out)[0]
    inner = a[-2].shape[-1] if name in ("aten.addmm", "aten.baddbmm") else a[0].shape[-1]
    return 2.0 * o.numel() * inner


class _Traffic(TorchDispatchMode):
    """Per part: kernels, bytes read, bytes written, matmul FLOPs (backward: the node's part)."""

    def __init__(self, backward: bool):
        super().__init__()
        self.backward = backward
        self.parts = collections.defaultdict(lambda: collections.Counter())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        if name in NO_TRAFFIC:
            return out
        part = _scope[-1]
        if self.backward:
            node = torch._C._current_autograd_node()
            if node is None:
                return out
            part = node.metadata.get("scope", "other")
        if part == "experts":  # (the fused activation has its own part, expert_act)
            part = "expert_gemm" if name in MATMULS else "expert_other"
        rec = self.parts[part]
        rec["kernels"] += 1
        rec["read"] += _nbytes(_tensors((args, kwargs)))
        rec["written"] += _nbytes(_tensors(out))
        rec["flops"] += _matmul_flops(name, args, out)
        rec[f"op:{name}"] += 1
        return out


BOUNDARY: dict = collections.Counter()  # forward boundary bytes of functions a fused kernel replaces


def _backward_boundary(node, name: str) -> None:
    """Add a custom Function's backward boundary: gradients in and out and its saved tensors."""
    def hook(grad_inputs, grad_outputs):
        saved = list(getattr(node, "saved_tensors", ()) or ())
        BOUNDARY[f"{name}:bwd"] += _nbytes(_tensors((grad_inputs, grad_outputs, saved)))
    node.register_hook(hook)


def _wrap(obj, method: str, scope: str, boundary: str = "") -> None:
    inner = getattr(obj, method)
    if getattr(inner, "_moe_traffic_wrapped", False):  # module functions: wrapped once per process
        return

    def wrapped(*a, **k):
        with _in_scope(scope):
            out = inner(*a, **k)
        _tag(out, scope)
        if boundary and torch.is_grad_enabled():
            BOUNDARY[boundary] += _nbytes(_tensors((a, k))) + _nbytes(_tensors(out))
            first = _tensors(out)[0]
            if first.grad_fn is not None and "Function" in type(first.grad_fn).__name__:
                _backward_boundary(first.grad_fn, boundary)
        return out
    wrapped._moe_traffic_wrapped = True
    setattr(obj, method, wrapped)


RECIPES = {  # router settings of the Megatron-Bridge model bridges (mirror 067f987, see docs/moe.md)
    "qwen3": dict(moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3),
    "deepseek-v3": dict(moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-4,
                        moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
                        moe_router_dtype="fp32", moe_router_pre_softmax=True),
    # GPT-OSS's experts also have biases; the local spec's in-place bias add after the row-parallel
    # reduction fails on one rank, so they are left out (the activation is what differs)
    "gpt-oss": dict(moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0,
                    glu_linear_offset=1.0, activation_func_clamp_value=7.0),
}


def _moe_layer(recipe: str, experts: int, topk: int, hidden: int, ffn: int, act_fusion: bool):
    import torch.nn.functional as F
    import megatron.core.transformer.mlp as mlp_mod
    from megatron.core.fusions.fused_bias_geglu import quick_gelu
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig
    kw = dict(num_layers=1, hidden_size=hidden, num_attention_heads=8, num_query_groups=4, ffn_hidden_size=4 * ffn,
              use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16, normalization="RMSNorm",
              gated_linear_unit=True, activation_func=quick_gelu if recipe == "gpt-oss" else F.silu,
              add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0, num_moe_experts=experts,
              moe_router_topk=topk, moe_ffn_hidden_size=ffn, moe_token_dispatcher_type="alltoall",
              moe_grouped_gemm=False, moe_router_force_load_balancing=True, bias_activation_fusion=act_fusion,
              bias_dropout_fusion=False)
    kw.update(RECIPES[recipe])
    spec = get_gpt_layer_local_spec(num_experts=experts, normalization="RMSNorm")
    moe = build_module(spec, config=TransformerConfig(**kw), layer_number=1).mlp
    _instrument(moe, mlp_mod)
    return moe


def _instrument(moe, mlp_mod) -> None:
    """Scope each part of the MoE layer by the Megatron method (or module function) running it."""
    router, disp = moe.router, moe.token_dispatcher
    _wrap(router, "gating", "router_gemm")
    _wrap(router, "routing", "router_topk", boundary="router_topk")
    for m in ("_apply_aux_loss", "_apply_seq_aux_loss", "_apply_global_aux_loss"):
        _wrap(router, m, "aux_loss")
    import megatron.core.transformer.moe.router as router_mod
    _wrap(router_mod, "compute_routing_scores_for_aux_loss", "aux_loss", boundary="aux_scores")
    _wrap(disp, "preprocess", "preprocess")
    _wrap(disp, "dispatch_preprocess", "permute")
    import megatron.core.transformer.moe.token_dispatcher as td
    _wrap(td, "permute", "permute", boundary="permute")
    _wrap(td, "unpermute", "unpermute", boundary="unpermute")
    for m, s in (("token_dispatch", "a2a"), ("token_combine", "a2a"), ("dispatch_postprocess", "sort"),
                 ("combine_preprocess", "sort"), ("combine_postprocess", "unpermute")):
        _wrap(disp, m, s)
    _wrap(moe, "routed_experts_compute", "experts")
    for expert in moe.experts.local_experts:  # label the GEMMs' autograd nodes before the activation's
        _wrap(expert.linear_fc1, "forward", "experts")
        _wrap(expert.linear_fc2, "forward", "experts")
    for fused in ("weighted_bias_swiglu_impl", "weighted_bias_quick_geglu_impl"):  # bias_activation_fusion
        _wrap(mlp_mod, fused, "expert_act", boundary="expert_act")
    _wrap(moe, "postprocess", "postprocess")


def measure(recipe: str = "qwen3", tokens: int = 256, experts: int = 128, topk: int = 8, hidden: int = 2048,
            ffn: int = 768, act_fusion: bool = True) -> dict:
    """{"fwd"|"bwd": {part: {kernels, read, written, flops, op:...}}, "boundary": {...}} of one MoE layer.
    ``act_fusion``: bias_activation_fusion (the recipes' setting); its torch.compile'd kernel runs
    eagerly here (dynamo disabled), its traffic as a fused kernel is the boundary "expert_act"."""
    torch.manual_seed(0)
    moe = _moe_layer(recipe, experts, topk, hidden, ffn, act_fusion)
    x = torch.randn(tokens, 1, hidden, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _Traffic(backward=False), _Traffic(backward=True)
    BOUNDARY.clear()
    with _TagNodes(), fwd:
        out = moe(x)
    y = (out[0] if isinstance(out, tuple) else out).float().sum()
    with bwd:
        y.backward()
    _alive.clear()
    plain = lambda d: {p: dict(c) for p, c in d.items()}  # noqa: E731
    return {"fwd": plain(fwd.parts), "bwd": plain(bwd.parts), "boundary": dict(BOUNDARY),
            "shape": dict(recipe=recipe, tokens=tokens, experts=experts, topk=topk, hidden=hidden, ffn=ffn,
                          act_fusion=act_fusion)}


def per_token(result: dict) -> dict:
    """{pass: {part: (kernels, bytes read + written per token, matmul FLOPs per token)}}."""
    n = result["shape"]["tokens"]
    table = {}
    for p in ("fwd", "bwd"):
        table[p] = {part: (c["kernels"], (c["read"] + c["written"]) / n, c["flops"] / n)
                    for part, c in sorted(result[p].items())}
    table["boundary"] = {k: v / n for k, v in result["boundary"].items()}
    return table


# Qwen3-30B-A3B's MoE shape (hidden 2048, 128 experts, top-8, width 768) at two token counts, fused and
# unfused activation; DeepSeek-V3's and GPT-OSS's routers and activations at 256 experts / 128 experts
# (their hidden and width shrunk to the Qwen3 shape to fit this machine: the router's bytes per token
# depend on the expert count, the activation's on the width, which is reported per routed row).
RUNS = (("qwen3", 256, {}), ("qwen3", 512, {}), ("qwen3", 256, {"act_fusion": False}),
        ("deepseek-v3", 256, {"experts": 256, "ffn": 256}), ("gpt-oss", 256, {"ffn": 768}))


SMALL = {"experts": 8, "topk": 2, "hidden": 256, "ffn": 128}
SMALL_RUNS = (("qwen3", 64, SMALL), ("qwen3", 128, SMALL))


def main() -> None:
    warnings.filterwarnings("ignore")
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:  # a free port: another run may hold any fixed one
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)
    host_ops._stub_cuda()
    torch._dynamo.config.disable = True  # the jit-fused activations (torch.compile) run eagerly on the CPU
    import megatron.core
    results = {"megatron_core": megatron.core.__version__, "torch": torch.__version__, "runs": []}
    small = "--small" in sys.argv  # a seconds-long check of the harness (tests/test_moe_traffic.py)
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    for recipe, tokens, kw in (SMALL_RUNS if small else RUNS):
        if names and recipe not in names:
            continue
        r = measure(recipe, tokens, **kw)
        results["runs"].append(r)
        print(recipe, tokens, kw, json.dumps(per_token(r)), flush=True)
    print(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
