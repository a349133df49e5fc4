"""Count the PyTorch operators Megatron-Core's transformer layers dispatch, by CUDA-graph scope.

The host (CPU) of an eager training step issues every kernel from Python and the ATen
dispatcher; cost/host.py prices that time per kernel. This script measures how many
kernel-launching ATen operators one Megatron-Core layer's forward and backward dispatch, split
into the scopes Megatron's CUDA graphs capture (``--cuda-graph-scope``: attn, mlp, moe_router,
moe_preprocess, moe), on this machine's CPU with the layer's local (non-Transformer-Engine)
spec: the counts depend on the code path, not on the device or the tensor sizes.

Forward operators are tagged with the scope of the Megatron method running them; backward
operators with the scope of the autograd node that runs them (the node's metadata is set in
the forward). View and metadata operators (view, transpose, detach, split, ...) launch no kernel
and are left out. The MoE layer is measured with 4 and 8 local experts (SequentialMLP) to split
its expert count into a fixed part and a per-expert part.

Run: ``python -m profilers.host_ops`` (needs megatron-core; CUDA calls are stubbed for the CPU).
"""

from __future__ import annotations

import collections
import contextlib
import os
import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# ATen operators that only make views or read metadata (no kernel launched).
NO_KERNEL = frozenset({
    "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.permute", "aten.expand", "aten.detach",
    "aten.split", "aten.split_with_sizes", "aten.unsqueeze", "aten.squeeze", "aten.slice", "aten.as_strided",
    "aten.alias", "aten.select", "aten.unbind", "aten.empty", "aten.new_empty_strided", "aten.new_empty",
    "aten.empty_strided", "aten.lift_fresh", "aten.reshape", "aten._reshape_alias"})

_scope = ["other"]
_alive: list = []  # autograd nodes' Python wrappers (and their metadata) live only while referenced


@contextlib.contextmanager
def _in_scope(name: str):
    _scope.append(name)
    try:
        yield
    finally:
        _scope.pop()


def _tag(out, scope: str) -> None:
    """Label the autograd nodes behind ``out`` that have no scope yet (those made since the last
    labelling, composite operators' inner nodes and custom Functions included) with ``scope``."""
    tensors = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if "scope" in node.metadata:
            continue
        node.metadata["scope"] = scope
        _alive.append(node)
        stack.extend(child for child, _ in node.next_functions if child is not None)


class _TagNodes(TorchFunctionMode):
    """Above autograd: label the nodes each torch call made with the scope running it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        _tag(out, _scope[-1])
        return out


class _Count(TorchDispatchMode):
    """Below autograd: count kernel-launching operators per scope (backward: the node's scope)."""

    def __init__(self, backward: bool):
        super().__init__()
        self.backward, self.counts = backward, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name not in NO_KERNEL:
            scope = _scope[-1]
            if self.backward:
                node = torch._C._current_autograd_node()
                if node is None:  # the harness's own loss and its seed gradient
                    return func(*args, **(kwargs or {}))
                scope = node.metadata.get("scope", "other")
            self.counts[scope] += 1
        return func(*args, **(kwargs or {}))


def _stub_cuda() -> None:
    """Megatron-Core's layers ask for CUDA streams, buffers and RNG trackers; give CPU stand-ins."""
    def cpu(fn):
        def wrapped(*a, **k):
            if "device" in k and str(k["device"]).startswith("cuda"):
                k["device"] = "cpu"
            return fn(*a, **k)
        return wrapped
    for name in ("ones", "zeros", "empty", "arange", "tensor", "full", "zeros_like", "ones_like", "empty_like"):
        setattr(torch, name, cpu(getattr(torch, name)))

    class Event:
        def synchronize(self):
            pass

    class Stream:
        def wait_stream(self, other):
            pass

        def record_event(self, *a):
            return Event()

        def __eq__(self, other):
            return True

        __hash__ = object.__hash__
    stream = Stream()
    torch.cuda.Stream = lambda *a, **k: stream
    torch.cuda.current_stream = lambda *a, **k: stream
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.current_device = lambda: "cpu"
    import megatron.core.utils as mcu
    from megatron.core.tensor_parallel import random as mcr
    import megatron.core.transformer.moe.moe_utils as moe_utils
    mcu.GlobalMemoryBuffer.get_tensor = lambda self, shape, dtype, name, mem_alloc_context=None: torch.empty(shape, dtype=dtype)
    mcr.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()
    moe_utils.te_general_gemm = None  # referenced unconditionally without Transformer Engine


def _wrap(obj, method: str, scope: str) -> None:
    inner = getattr(obj, method)

    def wrapped(*a, **k):
        with _in_scope(scope):
            out = inner(*a, **k)
        _tag(out, scope)  # what ran below the torch-function layer (scripted fusions)
        return out
    setattr(obj, method, wrapped)


def _layer(num_experts: int):
    import torch.nn.functional as F
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig
    kw = dict(num_layers=1, hidden_size=256, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=512,
              use_cpu_initialization=True, bf16=False, params_dtype=torch.float32, normalization="RMSNorm",
              gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, hidden_dropout=0.0,
              attention_dropout=0.0)
    if num_experts:
        kw.update(num_moe_experts=num_experts, moe_router_topk=2, moe_ffn_hidden_size=128,
                  moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False, moe_aux_loss_coeff=0.0,
                  moe_router_load_balancing_type="none")
    spec = get_gpt_layer_local_spec(num_experts=num_experts or None, normalization="RMSNorm")
    layer = build_module(spec, config=TransformerConfig(**kw), layer_number=1)
    _wrap(layer, "_forward_attention", "attn")
    if num_experts:
        _wrap(layer.pre_mlp_layernorm, "forward", "moe_router")  # TE's moe_router graph starts at the norm
        for method, scope in (("route", "moe_router"), ("preprocess", "moe_preprocess"), ("dispatch", "moe"),
                              ("routed_experts_compute", "moe"), ("combine", "moe"), ("postprocess", "moe")):
            _wrap(layer.mlp, method, scope)
    else:
        _wrap(layer, "_forward_mlp", "mlp")
    return layer


def count_layer(num_experts: int = 0) -> dict[str, dict[str, int]]:
    """{"fwd"|"bwd": {scope: kernel-launching operators}} of one layer (0 experts: dense)."""
    layer = _layer(num_experts)
    x = torch.randn(64, 2, 256, requires_grad=True)
    fwd, bwd = _Count(backward=False), _Count(backward=True)
    with _TagNodes(), fwd:
        out = layer(x, attention_mask=None)
    y = (out[0] if isinstance(out, tuple) else out).float().sum()
    with bwd:
        y.backward()
    _alive.clear()
    return {"fwd": dict(fwd.counts), "bwd": dict(bwd.counts)}


def host_time_per_op(num_experts: int = 0, repeats: int = 200) -> dict[str, float]:
    """Host seconds per kernel-launching operator of a layer's forward+backward on tiny tensors
    (the CPU kernels take next to nothing, so the time is Python, module and dispatcher overhead),
    beside one ``nn.Linear`` forward on the same CPU: their ratio carries a published per-Linear
    host time on a GPU server's CPU over to a per-operator time (cost/host.py)."""
    import time
    layer = _layer(num_experts)
    layer.__dict__.pop("_forward_attention", None)  # time the layer without the scope wrappers
    counts = count_layer(num_experts)
    ops = sum(sum(v.values()) for v in counts.values())
    x = torch.randn(8, 1, 256, requires_grad=True)
    linear, xl = torch.nn.Linear(256, 256), torch.randn(8, 256, requires_grad=True)

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 10]  # the 10th percentile: least disturbed by other load
    layer_s = best(lambda: layer(x, attention_mask=None)[0].sum().backward())
    linear_s = best(lambda: linear(xl))
    return {"layer_s": layer_s, "ops": ops, "per_op_s": layer_s / ops, "linear_fwd_s": linear_s,
            "per_op_over_linear": layer_s / ops / linear_s}


def main() -> None:
    warnings.filterwarnings("ignore")
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1)
    _stub_cuda()
    import megatron.core
    print(f"megatron-core {megatron.core.__version__}, torch {torch.__version__}")
    for experts in (0, 4, 8):
        print("dense" if not experts else f"moe, {experts} local experts", count_layer(experts))
    for experts in (0, 8):
        print("host time", "dense" if not experts else f"moe {experts}", host_time_per_op(experts))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
