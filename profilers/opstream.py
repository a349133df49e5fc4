"""Capture the kernels a runtime's own code issues in a training step, per block, as data.

The most accurate training simulators (Phantora, NSDI'26; Maya, EuroSys'26) do not assume which
kernels a framework launches: they run its code and time each kernel. autotune must answer
without a GPU and without torch at plan time, so the code runs once per architecture here, on
this machine's CPU with tiny tensors, under a TorchDispatchMode that records every
kernel-launching ATen operator of a forward and backward: its class (GEMM, attention, norm,
activation, softmax, cast, ...), the bytes it reads and writes and its FLOPs, the tensors autograd
saves, and which tensors are alive at each kernel. ``profilers/opstreams.py`` runs the models
and writes ``autotune/data/opstreams/*.json``; ``autotune/graph/opstream.py`` prices them.

What makes a CPU run say what a GPU step does:

* **Sizes as symbols.** Every size of the captured model is a distinct prime (``CAPTURE``: batch
  5, sequence 7, KV heads 11, query heads per KV head 13, hidden per query head 17, half the head
  dim 19, FFN (an expert's in a mixture of experts) 23, vocabulary 29, top-k 31, experts 37), so each tensor dimension factors into a monomial of the
  model's sizes (``3 x 5 x 7`` elements are 3 b s) and the stream holds for any size.
* **CUDA autocast**, emulated above autograd (``CudaAutocast``) with PyTorch's CUDA lists
  (aten/src/ATen/autocast_mode.cpp; the AMP docs' "CUDA Ops that can autocast"): GEMMs and
  attention cast their inputs to bf16, a parameter's cast cached for the autocast region;
  softmax, log-softmax and sums of 16-bit inputs compute in fp32 (set_opt_dtype); exp, log,
  rsqrt, pow, layer_norm and the losses cast to fp32; ``autocast(enabled=False)`` regions run as
  written. A CPU build cannot run CUDA's own autocast (its tensors need a CUDA device).
* **Attention** (``F.scaled_dot_product_attention``) is one opaque kernel forward and one
  backward, as the fused CUDA kernels (cuDNN or FlashAttention) are: its FLOPs (causal: the
  executed half) and its saved tensors (q, k, v, output and the fp32 log-sum-exp), whatever the
  CPU runs in its place.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from profilers.host_ops import NO_KERNEL

__all__ = ["CAPTURE", "CudaAutocast", "Recorder", "capture_step", "monomial", "Capture", "AUTOCAST_POLICIES"]

# Symbol -> the prime its size has in a capture (see the module docstring). "d2" is half the head
# dimension (RoPE splits the head in halves), so a head dimension is 2 d2.
# A mixture of experts adds its top-k "k" and its expert count "e" (k < e, as in every model).
CAPTURE = {"b": 5, "s": 7, "g": 11, "r": 13, "c": 17, "d2": 19, "f": 23, "v": 29, "k": 31, "e": 37}

MATMULS = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._grouped_mm"})
_NORM = frozenset({"aten.native_layer_norm", "aten.native_layer_norm_backward", "aten._fused_rms_norm",
                   "aten._fused_rms_norm_backward", "aten.native_group_norm", "aten.native_group_norm_backward"})
_ACTIVATION = frozenset({"aten.silu", "aten.silu_backward", "aten.gelu", "aten.gelu_backward", "aten.relu",
                         "aten.threshold_backward", "aten.sigmoid", "aten.sigmoid_backward"})
_SOFTMAX = frozenset({"aten._softmax", "aten._log_softmax", "aten._softmax_backward_data",
                      "aten._log_softmax_backward_data", "aten.nll_loss_forward", "aten.nll_loss_backward"})
# no kernel beyond NO_KERNEL's: metadata reads and views
_NOTHING = NO_KERNEL | {"aten.empty_like", "aten.is_nonzero", "aten.lift_fresh_copy", "aten.view_as_real",
                        "aten.view_as_complex", "aten._reshape_alias"}


def kernel_class(name: str, inputs: list, outputs: list) -> str:
    """The cost class of a kernel-launching ATen operator."""
    if name in MATMULS:
        return "gemm"
    if name in _NORM:
        return "norm"
    if name in _ACTIVATION:
        return "activation"
    if name in _SOFTMAX:
        return "softmax"
    if name in ("aten.embedding", "aten.embedding_dense_backward"):
        return "embedding"
    if name == "aten._local_scalar_dense":
        return "sync"
    floats_in = {t.dtype for t in inputs if t.is_floating_point()}
    floats_out = {t.dtype for t in outputs if t.is_floating_point()}
    if name in ("aten._to_copy", "aten.copy_") and floats_in and floats_out and floats_in != floats_out:
        return "cast"
    return "stream"


# 16-bit GEMMs run on a CPU's slow paths (1-25 GFLOP/s, docs/profiling.md); the capture needs their
# outputs' shapes and dtypes, so it computes them in fp32 and rounds
_FAST = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"})


def _matmul_in_fp32(func, args, kwargs):
    low = next((t.dtype for t in _tensors((args, kwargs)) if t.dtype in (torch.bfloat16, torch.float16)), None)
    if low is None:
        return func(*args, **kwargs)
    up = tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == low else t, (args, kwargs))
    return func(*up[0], **up[1]).to(low)


def _grouped_mm_by_groups(args, kwargs):
    """aten._grouped_mm as its group loop (what CUDA's fallback runs, aten/src/ATen/native/cuda/
    GroupedBlas.cpp _grouped_mm_fallback): the CPU kernel needs 16-byte strides, which the capture's
    prime sizes never have. 2D x 3D: each group's rows by its matrix; 3D x 2D: each group's columns;
    2D x 2D: each group's slice of the contracted dimension, one output matrix per group."""
    a, b = args[0], args[1]
    offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
    dtype = kwargs.get("out_dtype") or a.dtype
    ends = [int(e) for e in offs.tolist()]
    starts = [0] + ends[:-1]
    if a.dim() == 2 and b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1], dtype=dtype)
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            out[lo:hi] = (a[lo:hi].float() @ b[g].float()).to(dtype)
    elif a.dim() == 3 and b.dim() == 2:
        out = a.new_zeros(a.shape[1], b.shape[-1], dtype=dtype)
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            out[:, lo:hi] = (a[g].float() @ b[:, lo:hi].float()).to(dtype)
    else:
        out = a.new_zeros(len(ends), a.shape[0], b.shape[-1], dtype=dtype)
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            out[g] = (a[:, lo:hi].float() @ b[lo:hi].float()).to(dtype)
    return out


def monomial(n: int) -> tuple[int, dict[str, int]]:
    """(constant, {symbol: exponent}) with ``n = constant x prod(CAPTURE[sym] ** exp)``."""
    powers: dict[str, int] = {}
    for sym, p in CAPTURE.items():
        while n and n % p == 0:
            n //= p
            powers[sym] = powers.get(sym, 0) + 1
    return n, powers


def _terms(numel: int, element_bytes: int) -> tuple[int, dict[str, int]]:
    const, powers = monomial(numel)
    return const * element_bytes, powers


def _bytes(t: torch.Tensor) -> tuple[int, dict[str, int]]:
    """A tensor's bytes as a term; an expanded view is read once (at most its storage)."""
    numel = t.numel()
    storage = t.untyped_storage().nbytes() // t.element_size()
    return _terms(min(numel, storage) if storage else numel, t.element_size())


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _unique(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _matmul_flops(name: str, inputs: list, out: torch.Tensor) -> tuple[int, dict[str, int]] | None:
    mats = [t for t in inputs if t.dim() >= 2]
    if name not in MATMULS or not mats:
        return None
    inner = mats[-1].shape[-2] if name in ("aten.addmm", "aten.baddbmm") else mats[0].shape[-1]
    groups = 1
    if name == "aten._grouped_mm" and all(t.dim() == 2 for t in mats[:2]):
        groups = out.shape[0]  # a weight gradient: each group contracts only its own rows of ``inner``
    const, powers = monomial(out.numel() // groups * inner)
    return 2 * const, powers


@dataclass
class Capture:
    """What a capture recorded: kernels, saved tensors and live sets, in capture sizes."""

    kernels: list[dict] = field(default_factory=list)
    saved: dict = field(default_factory=dict)  # storage id -> ((block, scope, node type), bytes term)
    storages: dict = field(default_factory=dict)  # storage id -> (weakref, block, bytes term, weight cast)
    events: list[tuple[int, frozenset]] = field(default_factory=list)  # (kernel index, live storage ids)
    ids: dict = field(default_factory=dict)  # data pointer -> id of the storage living there now

    def storage_id(self, t: torch.Tensor, *, new: bool) -> int | None:
        """A storage's id; ``new``: register it when its address holds none alive (addresses are reused)."""
        ptr = t.untyped_storage().data_ptr()
        sid = self.ids.get(ptr)
        if sid is not None and self.storages[sid] is not None and self.storages[sid][0]() is not None:
            return sid
        if not new:
            return None
        sid = self.ids[ptr] = len(self.storages)
        self.storages[sid] = None
        return sid


class Recorder(TorchDispatchMode):
    """Below autograd: every kernel-launching operator with its block, scope, class, bytes and FLOPs."""

    def __init__(self, params: set[int], scopes: "Scopes"):
        super().__init__()
        self.params, self.scopes = params, scopes
        self.capture = Capture()
        self.backward = False
        self.muted = 0
        self.seen_params: set[int] = set()
        self._last_bwd = ("head", "")

    def _where(self) -> tuple[str, str]:
        if not self.backward:
            return self.scopes.block, self.scopes.path
        node = torch._C._current_autograd_node()
        if node is not None and "block" in node.metadata:
            self._last_bwd = (node.metadata["block"], node.metadata["scope"])
        return self._last_bwd  # the engine's gradient sums run between nodes: the last node's place

    def record(self, name: str, inputs: list, outputs: list, *, flops=None, kind: str | None = None) -> int:
        block, scope = self._where()
        index = len(self.capture.kernels)
        weight_cast = name == "aten._to_copy" and any(t.untyped_storage().data_ptr() in self.params for t in inputs)
        first_use = [] if self.backward else [t for t in _unique(inputs) if t.untyped_storage().data_ptr() in self.params
                                               and t.untyped_storage().data_ptr() not in self.seen_params]
        self.seen_params |= {t.untyped_storage().data_ptr() for t in first_use}
        self.capture.kernels.append({
            "op": name, "phase": "bwd" if self.backward else "fwd", "block": block, "scope": scope,
            "class": kind or kernel_class(name, inputs, outputs),
            "dtype": str(next((t.dtype for t in outputs if t.is_floating_point()), torch.float32)).removeprefix("torch."),
            "read": [_bytes(t) for t in _unique(inputs)], "written": [_bytes(t) for t in _unique(outputs)],
            "flops": [flops] if flops else [], "weight_cast": weight_cast,
            "params": [monomial(t.untyped_storage().nbytes() // t.element_size()) for t in first_use]})
        for t in outputs:
            if t.untyped_storage().data_ptr() in self.params or self.capture.storage_id(t, new=False) is not None:
                continue
            sid = self.capture.storage_id(t, new=True)
            self.capture.storages[sid] = (weakref.ref(t.untyped_storage()), block, _bytes(t), weight_cast)
        live = frozenset(k for k, v in self.capture.storages.items() if v is not None and v[0]() is not None)
        self.capture.events.append((index, live))
        return index

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name == "aten._grouped_mm":
            out = _grouped_mm_by_groups(args, kwargs or {})
        else:
            out = _matmul_in_fp32(func, args, kwargs or {}) if name in _FAST else func(*args, **(kwargs or {}))
        if self.muted or name in _NOTHING:
            return out
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        flops = _matmul_flops(name, inputs, outputs[0]) if outputs else None
        self.record(name, inputs, outputs, flops=flops)
        return out

    def saved_by_nodes(self, roots: list) -> None:
        """After the forward: every tensor the autograd graph keeps for backward (each node's
        ``_saved_*`` attributes, a custom Function's ``saved_tensors``), charged once to the
        block and scope of the first node holding it; parameters are the model's, not saved."""
        seen, stack = set(), [r for r in roots if r is not None]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            stack.extend(child for child, _ in node.next_functions if child is not None)
            held = [getattr(node, n) for n in dir(node) if n.startswith("_saved_")]
            held += list(getattr(node, "saved_tensors", ()) or ())
            for t in _tensors(held):
                sid = self.capture.storage_id(t, new=False)
                if sid is None or sid in self.capture.saved or t.untyped_storage().data_ptr() in self.params:
                    continue
                where = (node.metadata.get("block", "?"), node.metadata.get("scope", ""), type(node).__name__)
                self.capture.saved[sid] = (where, _bytes(t))

    @contextlib.contextmanager
    def muting(self):
        self.muted += 1
        try:
            yield
        finally:
            self.muted -= 1


class Scopes:
    """The module running now (forward hooks) and its block: "embedding" before the first
    decoder layer, "layer.N" inside layer N, "head" after the last."""

    def __init__(self, model: torch.nn.Module, layers: list[torch.nn.Module]):
        self.names = {m: n for n, m in model.named_modules()}
        self.layer_index = {m: i for i, m in enumerate(layers)}
        self.stack: list[str] = []
        self.block, self.path = "embedding", ""
        self._last = len(layers) - 1
        self._current_layer: int | None = None
        self._prefix = ""

    def pre(self, module, args) -> None:
        if module in self.layer_index:
            self._current_layer = self.layer_index[module]
            self.block, self._prefix = f"layer.{self._current_layer}", self.names[module] + "."
        self.stack.append(self.names.get(module, "?"))
        self.path = self.stack[-1].removeprefix(self._prefix) if self._current_layer is not None else self.stack[-1]

    def post(self, module, args, out) -> None:
        self.stack.pop()
        if module in self.layer_index:
            last = self.layer_index[module] == self._last
            self.block, self._current_layer, self._prefix = ("head" if last else "between"), None, ""
        self.path = self.stack[-1].removeprefix(self._prefix) if self.stack else ""


def _tag(out, scopes: Scopes) -> None:
    """Label the autograd nodes behind ``out`` made since the last labelling with the block and
    scope running now (as profilers/host_ops.py labels Megatron's scopes)."""
    stack = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if "block" in node.metadata:
            continue
        node.metadata["block"], node.metadata["scope"] = scopes.block, scopes.path
        _KEEP.append(node)
        stack.extend(child for child, _ in node.next_functions if child is not None)


_KEEP: list = []  # nodes' Python wrappers hold their metadata only while referenced

# CUDA autocast's policies (autocast_mode.cpp) for the torch functions these models call: policy ->
# (the ATen operators registered for AutocastCUDA that the functions reach, the functions).
# F.cross_entropy reaches log_softmax (set_opt_dtype) and nll_loss (fp32) inside ATen, where this
# emulation cannot act: it casts the input to fp32 instead (the models here pass fp32 logits).
AUTOCAST_POLICIES = {
    "lower": (("linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "einsum"),
              (F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
               torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.Tensor.addmm, torch.baddbmm,
               torch.Tensor.baddbmm, torch.addbmm, torch.mv, torch.einsum)),
    "fp32": (("exp", "log", "rsqrt", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "reciprocal", "layer_norm", "group_norm",
              "nll_loss", "mse_loss", "softplus", "logsumexp", "rms_norm"),
             (torch.exp, torch.Tensor.exp, torch.log, torch.Tensor.log, torch.rsqrt, torch.Tensor.rsqrt, torch.pow,
              torch.Tensor.pow, torch.Tensor.__pow__, torch.reciprocal, torch.Tensor.reciprocal, F.layer_norm,
              F.group_norm, F.nll_loss, F.cross_entropy, F.mse_loss, F.softplus, torch.logsumexp)),
    "set_opt_dtype": (("softmax.int", "log_softmax.int", "sum", "cumsum", "prod"),
                      (F.softmax, torch.softmax, torch.Tensor.softmax, F.log_softmax, torch.log_softmax,
                       torch.Tensor.log_softmax, torch.sum, torch.Tensor.sum, torch.cumsum, torch.Tensor.cumsum,
                       torch.prod, torch.Tensor.prod)),
    "promote": (("addcmul", "addcdiv", "index_put", "scatter_add"),
                (torch.addcmul, torch.addcdiv, torch.Tensor.index_put_, torch.Tensor.scatter_add)),
}
_LOWER, _FP32, _SET_OPT_DTYPE, _PROMOTE = (set(AUTOCAST_POLICIES[p][1]) for p in ("lower", "fp32", "set_opt_dtype", "promote"))


class CudaAutocast(TorchFunctionMode):
    """bf16 autocast as CUDA runs it (module docstring), and each torch call's new autograd nodes
    labelled with the block and scope running it."""

    def __init__(self, recorder: Recorder, scopes: Scopes):
        super().__init__()
        self.recorder, self.scopes = recorder, scopes
        self.enabled = [True]
        self.cache: dict[int, torch.Tensor] = {}

    @contextlib.contextmanager
    def set_enabled(self, on: bool):
        self.enabled.append(on)
        try:
            yield
        finally:
            self.enabled.pop()

    def _cast(self, to: torch.dtype):
        def cast(t):
            if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != to and t.dtype != torch.float64):
                return t
            if t.is_leaf and t.requires_grad:  # autocast's cached_cast: once per region for a parameter
                if id(t) not in self.cache:
                    self.cache[id(t)] = t.to(to)
                return self.cache[id(t)]
            return t.to(to)
        return cast

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (F.dropout, torch.dropout):
            out = dropout(*args, **kwargs)
            _tag(out, self.scopes)
            return out
        if func is F.rms_norm:
            if self.enabled[-1]:  # autocast's fp32 list holds rms_norm
                args, kwargs = tree_map(self._cast(torch.float32), (args, kwargs))
            out = rms_norm(self.recorder, *args, **kwargs)
            _tag(out, self.scopes)
            return out
        if self.enabled[-1]:
            if func is F.scaled_dot_product_attention:
                args, kwargs = tree_map(self._cast(torch.bfloat16), (args, kwargs))
                out = attention(self.recorder, *args, **kwargs)
                _tag(out, self.scopes)
                return out
            if func in _LOWER:
                args, kwargs = tree_map(self._cast(torch.bfloat16), (args, kwargs))
            elif func in _FP32:
                args, kwargs = tree_map(self._cast(torch.float32), (args, kwargs))
            elif func in _SET_OPT_DTYPE and kwargs.get("dtype") is None:
                first = next(iter(_tensors(args)), None)
                if first is not None and first.is_floating_point():
                    kwargs["dtype"] = torch.float32
            elif func in _PROMOTE:
                floats = {t.dtype for t in _tensors((args, kwargs)) if t.is_floating_point()}
                if len(floats) > 1:
                    args, kwargs = tree_map(self._cast(torch.float32), (args, kwargs))
        elif func is F.scaled_dot_product_attention:
            out = attention(self.recorder, *args, **kwargs)
            _tag(out, self.scopes)
            return out
        out = func(*args, **kwargs)
        _tag(out, self.scopes)
        return out


def _attention_flops(q: torch.Tensor, k: torch.Tensor, causal: bool) -> tuple[int, dict[str, int]]:
    """QK^T and PV: 4 x batch x heads x s_q x s_k x head dim; a causal kernel runs half."""
    const, powers = monomial(q.numel() * k.shape[-2])
    return (2 if causal else 4) * const, powers


class _Attention(torch.autograd.Function):
    """A fused attention kernel: one forward and one backward kernel, whatever runs here."""

    @staticmethod
    def forward(ctx, recorder, q, k, v, mask, dropout_p, causal, scale, gqa):
        with recorder.muting():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=causal,
                                                 scale=scale, enable_gqa=gqa)
            lse = q.new_empty(q.shape[:-1], dtype=torch.float32)  # the kernels' log-sum-exp, kept for backward
        flops = _attention_flops(q, k, causal)
        recorder.record("attention", [q, k, v] + ([mask] if mask is not None else []), [out, lse], flops=flops,
                        kind="attention")
        ctx.recorder, ctx.flops = recorder, (flops[0] * 5 // 2, flops[1])  # backward: 2.5x (FlashAttention-2 paper)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        with ctx.recorder.muting():
            grads = [torch.zeros_like(t) for t in (q, k, v)]
        const, powers = ctx.flops
        ctx.recorder.record("attention_backward", [q, k, v, out, lse, grad], grads, kind="attention_bwd",
                            flops=(const, powers))
        return (None, *grads, None, None, None, None, None)


def attention(recorder: Recorder, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    return _Attention.apply(recorder, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


class _RMSNorm(torch.autograd.Function):
    """``F.rms_norm`` as CUDA runs it: aten._fused_rms_norm, one kernel each way (PyTorch's
    rms_norm_symint dispatches there; a CPU build runs it as composite ops)."""

    @staticmethod
    def forward(ctx, recorder, x, shape, weight, eps):
        with recorder.muting():
            out = torch.ops.aten._fused_rms_norm(x, list(shape), weight, eps)
            y, rstd = out[0].contiguous(), out[1].contiguous()
        recorder.record("aten._fused_rms_norm", [x] + ([weight] if weight is not None else []), [y, rstd], kind="norm")
        ctx.recorder, ctx.has_weight = recorder, weight is not None
        ctx.save_for_backward(x, rstd, weight)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, rstd, weight = ctx.saved_tensors
        with ctx.recorder.muting():
            dx = torch.zeros_like(x)
            dw = torch.zeros_like(weight) if ctx.has_weight else None
        ctx.recorder.record("aten._fused_rms_norm_backward", [grad, x, rstd] + ([weight] if ctx.has_weight else []),
                            [dx] + ([dw] if dw is not None else []), kind="norm")
        return None, dx, None, dw, None


def rms_norm(recorder: Recorder, x, normalized_shape, weight=None, eps=None):
    return _RMSNorm.apply(recorder, x, tuple(normalized_shape), weight, eps)


def dropout(x, p=0.5, training=True, inplace=False):
    """F.dropout as CUDA runs it: one fused kernel (aten.native_dropout: ATen's dropout takes it
    for CUDA tensors, is_fused_kernel_acceptable; a CPU runs bernoulli, div and mul)."""
    if not training or p == 0.0:
        return x
    return torch.ops.aten.native_dropout(x, p, True)[0]


@contextlib.contextmanager
def _patched_autocast(mode: CudaAutocast, modules: list):
    """``torch.autocast(..., enabled=False)`` and transformers' ``maybe_autocast`` push a disabled
    region on the emulator (the model code asks for fp32 there, e.g. RoPE's frequencies)."""
    @contextlib.contextmanager
    def region(*args, enabled: bool = True, **kwargs):
        with mode.set_enabled(enabled and mode.enabled[-1]):
            yield

    saved = [(m, name, getattr(m, name)) for m in modules for name in ("autocast", "maybe_autocast") if hasattr(m, name)]
    for module, name, _ in saved:
        setattr(module, name, region)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def capture_step(model: torch.nn.Module, layers: list[torch.nn.Module], loss_fn, *, patch: list = (),
                 backward: bool = True, autocast: bool = True) -> Capture:
    """Run ``loss_fn()`` forward and backward under the emulated bf16 CUDA autocast; every
    kernel with its block ("embedding", "layer.N", "between", "head"), scope, bytes and FLOPs.
    ``backward=False, autocast=False``: an inference forward as written (its dtypes, no autograd)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    scopes = Scopes(model, layers)
    handles = [torch.nn.modules.module.register_module_forward_pre_hook(scopes.pre),
               torch.nn.modules.module.register_module_forward_hook(scopes.post)]
    recorder = Recorder(params, scopes)
    mode = CudaAutocast(recorder, scopes)
    try:
        with recorder:
            with _patched_autocast(mode, [torch, *patch]), mode, mode.set_enabled(autocast), \
                    torch.set_grad_enabled(backward):
                loss = loss_fn()
            for h in handles:
                h.remove()
            handles = []
            if backward:
                with recorder.muting():
                    recorder.saved_by_nodes([loss.grad_fn])
                recorder.backward = True
                loss.backward()
    finally:
        for h in handles:
            h.remove()
        _KEEP.clear()
    capture = recorder.capture
    grads = {capture.storage_id(p.grad, new=False) for p in model.parameters() if p.grad is not None}
    capture.storages = {k: v for k, v in capture.storages.items() if k not in grads and v is not None}
    return capture
