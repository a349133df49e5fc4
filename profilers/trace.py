"""Trace an ``nn.Module`` into the cost model's operator graph, without real memory.

``torch.export`` captures the forward pass on the meta device; an FX interpreter replays the
exported graph on meta tensors under ``torch.utils.flop_counter.FlopCounterMode``, giving
each operator's FLOPs, its input, weight and output bytes, and which outputs are views of an
input. Operators become :class:`autotune.graph.operators.Operator` nodes of a networkx DAG
(edges follow the data), so ``OpTable.from_graph`` and the roofline cost model price a
user's own model; views and other aliasing ops allocate nothing and launch no kernel, so they
are left out of the operator graph but kept for liveness (:mod:`profilers.liveness`).

Conventions match ``autotune.graph.operators``: amounts are for the traced batch (trace one
sequence for per-sequence figures); ``model_flops`` counts full s x s attention and ``flops``
the executed half of causal attention; sharding is ``replicated`` (a traced module says
nothing about tensor parallelism); ``saved_bytes`` is 0 (a forward graph does not show what
autograd keeps).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch
from torch.utils.flop_counter import FlopCounterMode

from autotune.errors import AutotuneError
from autotune.graph.operators import Operator
from profilers.liveness import Liveness, Step, liveness

__all__ = ["TracedModel", "trace_module", "trace_training", "classify"]

_GEMM = {"linear", "mm", "addmm", "matmul"}
_BMM = {"bmm", "baddbmm"}
_ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_cudnn_attention"}
_NORM = {"layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "batch_norm"}
_LOSS = {"cross_entropy", "cross_entropy_loss", "nll_loss", "nll_loss_forward", "log_softmax", "_log_softmax"}
# Backward FLOPs / forward FLOPs and backward kernels per kind, as autotune.graph.operators sets them.
_BACKWARD = {"gemm": (2.0, 2), "bmm": (2.0, 2), "attention": (2.5, 1)}


def classify(op_name: str, out_dims: int, weight_inputs: int) -> str:
    """The cost model's operator kind of an aten op (``aten.linear.default`` -> ``gemm``)."""
    base = op_name.split(".")[1] if op_name.startswith("aten.") else op_name
    if base in _ATTENTION:
        return "attention"
    if base in _GEMM:
        return "gemm" if weight_inputs or out_dims <= 2 else "bmm"
    if base in _BMM:
        return "bmm"
    if base in _NORM:
        return "norm"
    if base in _LOSS:
        return "loss"
    if base == "embedding":
        return "embedding"
    return "elementwise"


@dataclass(frozen=True, kw_only=True)
class TracedModel:
    graph: nx.DiGraph  # Operator nodes in the autotune.graph.operators form
    liveness: Liveness
    num_params: int
    param_bytes: float  # parameters and buffers
    input_bytes: float
    flops_by_aten_op: dict[str, float]

    @property
    def operators(self) -> list[Operator]:
        return [self.graph.nodes[n]["op"] for n in nx.topological_sort(self.graph) if "op" in self.graph.nodes[n]]

    @property
    def model_flops(self) -> float:
        return float(sum(op.model_flops for op in self.operators))


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch.export logs its diagnostics (symbolic shapes, guards) to stderr; the failure, if
    any, is reported once by the caller instead."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # torch sets levels on its child loggers; this overrides them
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _export(module: torch.nn.Module, args: tuple) -> torch.export.ExportedProgram:
    try:
        with _quiet_torch_logs():
            return torch.export.export(module, args)
    except Exception as err:  # torch.export raises many types; all mean "cannot be traced"
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise AutotuneError("module", f"cannot be traced by torch.export: {type(err).__name__}: {first[:200]}") from None


def _meta(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype, device="meta")
    return val


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(t: torch.Tensor) -> float:
    return float(t.numel() * t.element_size())


class _Recorder(torch.fx.Interpreter):
    """Replays the graph on meta tensors; records FLOPs, storages and aliasing per node."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.storage: dict[int, int] = {}  # id(tensor) -> storage id
        self.records: dict[str, dict[str, Any]] = {}
        self.flops_by_op: dict[str, float] = {}
        self._next = 0

    def new_storage(self, t: torch.Tensor) -> int:
        self._next += 1
        self.storage[id(t)] = self._next
        return self._next

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op in ("placeholder", "get_attr"):  # inputs, parameters, captured constants
            out = super().run_node(n)
            self.records[n.name] = {"placeholder": [(self.new_storage(t), _nbytes(t), t) for t in _tensors(out)]}
            return out
        if n.op != "call_function":
            return super().run_node(n)
        inputs = [t for t in _tensors(list(self.env.get(a) for a in n.all_input_nodes))]
        with FlopCounterMode(display=False) as counter:
            out = super().run_node(n)
        created, aliases = [], []
        for t in _tensors(out):
            base = next((i for i in inputs if torch._C._is_alias_of(t, i)), None)
            if base is not None:
                self.storage[id(t)] = self.storage[id(base)]
                aliases.append(t)
            else:
                created.append((self.new_storage(t), _nbytes(t)))
        for op, count in counter.get_flop_counts().get("Global", {}).items():
            self.flops_by_op[str(op)] = self.flops_by_op.get(str(op), 0.0) + count
        self.records[n.name] = {"flops": float(counter.get_total_flops()), "inputs": inputs, "out": _tensors(out),
                                "created": created, "is_view": not created and bool(aliases)}
        return out


def _op_name(n: torch.fx.Node) -> str:
    return str(n.target)


def _operator(n: torch.fx.Node, rec: dict[str, Any], storage: dict[int, int], weights: set[int]) -> Operator:
    """The Operator of one traced call (see the module docstring for the conventions)."""
    ins = [(storage[id(t)], t) for t in rec["inputs"]]
    weight_in = [t for sid, t in ins if sid in weights]
    act_in = sum(_nbytes(t) for sid, t in ins if sid not in weights)
    out_dims = max((t.dim() for t in rec["out"]), default=0)
    kind = classify(_op_name(n), out_dims, len(weight_in))
    model_flops = rec["flops"]
    causal = kind == "attention" and (n.kwargs.get("is_causal") or (len(n.args) > 5 and n.args[5] is True))
    bwd_factor, bwd_kernels = _BACKWARD.get(kind, (0.0, 1))
    return Operator(
        name=n.name, kind=kind, flops=model_flops / 2 if causal else model_flops, model_flops=model_flops,
        act_in_bytes=act_in, act_out_bytes=sum(_nbytes(t) for t in rec["out"]),
        weight_bytes=sum(_nbytes(t) for t in weight_in), params=sum(t.numel() for t in weight_in),
        saved_bytes=0.0, sharding="replicated", bwd_flops_factor=bwd_factor, bwd_kernels=bwd_kernels)


def _placeholder_kinds(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """"param", "buffer" (persistent, not counted as parameters), "tied" (a parameter already
    lifted under another name, e.g. tied embeddings) or "input" per placeholder."""
    names = {"PARAMETER": "param", "BUFFER": "buffer", "CONSTANT_TENSOR": "buffer"}
    kinds, seen = {}, set()
    for spec in ep.graph_signature.input_specs:
        kind = names.get(spec.kind.name, "input")
        value = ep.state_dict.get(spec.target) if spec.target else None
        if value is not None and id(value) in seen:
            kind = "tied"
        elif value is not None:
            seen.add(id(value))
        kinds[spec.arg.name] = kind
    return kinds


def _build_graph(gm: torch.fx.GraphModule, rec: _Recorder, weights: set[int]) -> nx.DiGraph:
    """Operators linked by data: each edge runs from the op that created a storage to its readers."""
    graph = nx.DiGraph()
    graph.add_node("input")
    producer: dict[int, str] = {}
    for n in gm.graph.nodes:
        r = rec.records.get(n.name)
        if n.op != "call_function" or r is None:
            continue
        for sid, _ in r["created"]:
            producer[sid] = n.name
        if r["is_view"]:
            continue
        graph.add_node(n.name, op=_operator(n, r, rec.storage, weights))
        sources = {producer.get(rec.storage[id(t)], "input") for t in r["inputs"]} or {"input"}
        for src in sources:
            graph.add_edge(src if src in graph else "input", n.name)
    graph.add_node("output")
    for node in list(graph.nodes):
        if node != "output" and graph.out_degree(node) == 0:
            graph.add_edge(node, "output")
    return graph


def _steps(gm: torch.fx.GraphModule, rec: _Recorder) -> tuple[list[Step], list[int]]:
    steps, outputs = [], []
    for n in gm.graph.nodes:
        r = rec.records.get(n.name)
        if n.op == "call_function" and r is not None:
            steps.append(Step(name=n.name, reads=tuple(rec.storage[id(t)] for t in r["inputs"]),
                              creates=tuple(r["created"])))
        if n.op == "output":
            outs = [t for a in n.all_input_nodes for t in _tensors(rec.records.get(a.name, {}).get("out", []))]
            outputs = [rec.storage[id(t)] for t in outs if id(t) in rec.storage]
    return steps, outputs


def trace_module(module: torch.nn.Module, args: Sequence[Any]) -> TracedModel:
    """Export ``module`` (its parameters may be on the meta device) called on ``args`` and
    build its operator graph, FLOP counts and liveness peak memory."""
    ep = _export(module, tuple(args))
    gm = ep.graph_module
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    rec = _Recorder(gm)
    rec.run(*[_meta(n.meta.get("val")) for n in placeholders])
    kinds = _placeholder_kinds(ep)
    weights: set[int] = set()
    param_bytes = input_bytes = 0.0
    num_params = 0
    for n in [n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")]:
        kind = kinds.get(n.name, "input") if n.op == "placeholder" else "buffer"
        for sid, nbytes, t in rec.records[n.name]["placeholder"]:
            if kind == "input":
                input_bytes += nbytes
                continue
            weights.add(sid)
            if kind == "tied":
                continue
            param_bytes += nbytes
            num_params += t.numel() if kind == "param" else 0
    steps, outputs = _steps(gm, rec)
    live = liveness(steps, persistent_bytes=param_bytes + input_bytes, outputs=outputs)
    return TracedModel(graph=_build_graph(gm, rec, weights), liveness=live, num_params=num_params,
                       param_bytes=param_bytes, input_bytes=input_bytes, flops_by_aten_op=dict(rec.flops_by_op))


def trace_training(module: torch.nn.Module, args: Sequence[Any], targets: torch.Tensor | None = None) -> Liveness:
    """Liveness peak of a training step's forward and backward (no optimizer): the joint aten
    graph of loss and parameter gradients, traced by make_fx on meta tensors. The loss is the
    cross entropy of the output against ``targets`` (a mean of the output without targets);
    saved activations live from the forward op that makes them to the backward op that reads
    them, and the gradients to the end."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call

    names = [n for n, _ in module.named_parameters()]
    buffers = dict(module.named_buffers())

    def step(params: list[torch.Tensor], inputs: tuple, labels: torch.Tensor | None):
        out = functional_call(module, {**dict(zip(names, params)), **buffers}, inputs).float()
        loss = out.mean() if labels is None else torch.nn.functional.cross_entropy(out.flatten(0, 1), labels.flatten())
        return torch.autograd.grad(loss, params)

    params = [p.detach().requires_grad_() for p in module.parameters()]
    try:
        with _quiet_torch_logs():
            gm = make_fx(step)(params, tuple(args), targets)
    except Exception as err:  # as _export: anything here means the step cannot be traced
        raise AutotuneError("module", f"training step cannot be traced: {type(err).__name__}: {str(err)[:200]}") from None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    rec = _Recorder(gm)
    rec.run(*[_meta(n.meta.get("val")) for n in placeholders])
    held = [n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")]
    persistent = sum(nbytes for n in held for _, nbytes, _ in rec.records[n.name]["placeholder"])
    steps, outputs = _steps(gm, rec)
    return liveness(steps, persistent_bytes=persistent, outputs=outputs)
