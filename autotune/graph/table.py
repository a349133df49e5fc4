"""Array form of an operator graph: one numpy array per operator attribute.

The cost model evaluates many parallel choices at once by broadcasting these arrays against
arrays of choices, so graphs are converted once per (model, sequence length, dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from typing import TYPE_CHECKING

import numpy as np

from autotune.graph.opstream import explicit_mask_share, stream_for, stream_operators
from autotune.graph.operators import (TP_SPLIT, Operator, embedding_operators, head_operators, layer_operators,
                                      operators)

if TYPE_CHECKING:
    import networkx as nx
from autotune.spec.model import ModelSpec

__all__ = ["OpTable", "ModelTables", "model_tables", "runtime_tables", "stream_tables", "STREAM_DTYPES"]

# Dtypes a captured operator stream holds for: it was captured under bf16 autocast (fp16's runs
# the same kernels at the same sizes)
STREAM_DTYPES = ("bf16", "fp16")


@dataclass(frozen=True, eq=False)
class OpTable:
    """Per-operator arrays of one block (a layer, the embedding or the head); see Operator."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    flops: np.ndarray
    model_flops: np.ndarray
    in_bytes: np.ndarray
    out_bytes: np.ndarray
    weight_bytes: np.ndarray
    saved_bytes: np.ndarray
    params: np.ndarray
    in_split: np.ndarray  # split by TP (else whole, or split by sequence parallelism)
    out_split: np.ndarray
    saved_split: np.ndarray
    weights_split: np.ndarray
    runs_replicated: np.ndarray  # a replicated op: sequence parallelism splits its work
    bwd_flops_factor: np.ndarray
    bwd_bytes_factor: np.ndarray
    kernels: np.ndarray
    bwd_kernels: np.ndarray
    selective: np.ndarray
    selective_dropped_bytes: np.ndarray
    shares_input: np.ndarray  # its input's low-precision cast is the previous GEMM's (cost/quantize.py cast_s)
    head_dim: np.ndarray  # fused attention's head width, 0 for other operators
    masked_share: np.ndarray  # share of layers whose fused attention runs with an explicit mask

    @classmethod
    def from_graph(cls, graph: nx.DiGraph) -> "OpTable":
        return cls.from_operators(operators(graph))

    @classmethod
    def from_operators(cls, ops: list[Operator]) -> "OpTable":
        arr = lambda attr: np.array([float(getattr(op, attr)) for op in ops])  # noqa: E731
        split = np.array([TP_SPLIT[op.sharding] for op in ops], dtype=bool).reshape(-1, 3)
        return cls(
            names=tuple(op.name for op in ops), kinds=tuple(op.kind for op in ops),
            flops=arr("flops"), model_flops=arr("model_flops"), in_bytes=arr("act_in_bytes"),
            out_bytes=arr("act_out_bytes"), weight_bytes=arr("weight_bytes"),
            saved_bytes=arr("saved_bytes"), params=arr("params"),
            in_split=split[:, 0], out_split=split[:, 1], saved_split=split[:, 2],
            weights_split=np.array([op.sharding != "replicated" for op in ops]),
            runs_replicated=np.array([op.sharding == "replicated" for op in ops]),
            bwd_flops_factor=arr("bwd_flops_factor"), bwd_bytes_factor=arr("bwd_bytes_factor"),
            kernels=arr("kernels"), bwd_kernels=arr("bwd_kernels"),
            selective=np.array([op.selective_recompute for op in ops]),
            selective_dropped_bytes=arr("selective_dropped_bytes"),
            shares_input=np.array([op.shares_input for op in ops], dtype=bool),
            head_dim=arr("head_dim"), masked_share=arr("masked_share"),
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def num_params(self) -> int:
        return int(self.params.sum())


@dataclass(frozen=True, eq=False)
class ModelTables:
    """The block tables of a model at one sequence length and activation dtype.

    ``layer`` is a dense layer. A mixture-of-experts model adds ``moe_layer`` (an MoE layer
    without its routed experts: attention, router, permutation, shared experts) and
    ``experts`` (the routed experts' grouped GEMMs over all routed rows, weights of all
    experts), which cost/moe.py prices under expert parallelism.
    """

    model: ModelSpec
    seq_len: int
    act_bytes: int
    attention_impl: str
    layer: OpTable
    embedding: OpTable | None
    head: OpTable | None
    moe_layer: OpTable | None = None
    experts: OpTable | None = None
    qkv_fused: bool = True  # Q, K and V as one GEMM (graph/operators.py _qkv_projections)
    op_stream: str = ""  # the captured operator stream the tables come from (graph/opstream.py); "" the graph

    def layer_counts(self, first: int = 0, end: int | None = None) -> tuple[int, int]:
        """(dense layers, MoE layers) among layers ``[first, end)``."""
        end = self.model.num_layers if end is None else end
        memo = self.__dict__.setdefault("_layer_counts", {})  # not a field: the tables are frozen, this only caches
        found = memo.get((first, end))
        if found is None:  # every MoE stage cost asks (cost/moe.py moe_layer_split): counted once per range
            moe = sum(self.model.is_moe_layer(i) for i in range(first, end)) if self.moe_layer is not None else 0
            found = memo[(first, end)] = (end - first - moe, moe)
        return found

    def _layers_sum(self, attr: str, expert_share: float = 1.0) -> float:
        dense, moe = self.layer_counts()
        total = dense * float(getattr(self.layer, attr).sum())
        if moe:
            total += moe * (float(getattr(self.moe_layer, attr).sum())
                            + expert_share * float(getattr(self.experts, attr).sum()))
        return total

    @property
    def num_params(self) -> int:
        """All parameters (tied embeddings counted once)."""
        extra = sum(t.num_params for t in (self.embedding, self.head) if t is not None)
        return int(round(self._layers_sum("params"))) + extra

    @property
    def num_active_params(self) -> int:
        """Parameters one token uses: top-k of the routed experts (all of a dense model)."""
        m = self.model
        share = m.num_experts_per_token / m.num_experts if m.is_moe else 1.0
        extra = sum(t.num_params for t in (self.embedding, self.head) if t is not None)
        return int(round(self._layers_sum("params", share))) + extra

    def layers_model_flops(self) -> float:
        """Forward model FLOPs of all transformer layers for one sequence."""
        return self._layers_sum("model_flops")

    def model_flops_per_sequence(self) -> float:
        """Forward + backward model FLOPs of one sequence (3x forward, no recomputation); an MoE
        layer counts the FLOPs of the experts each token is routed to."""
        fwd = self._layers_sum("model_flops")
        for table in (self.embedding, self.head):
            if table is not None:
                fwd += table.model_flops.sum()
        return 3.0 * float(fwd)


@lru_cache(maxsize=256)
def model_tables(model: ModelSpec, seq_len: int, act_bytes: int, attention_impl: str = "flash",
                 qkv_fused: bool = True) -> ModelTables:
    """Build (and cache) the block tables; specs are frozen and hashable."""
    layer = OpTable.from_operators(layer_operators(model, seq_len, act_bytes, attention_impl, qkv_fused=qkv_fused))
    moe_layer = experts = None
    if model.is_moe:
        ops = layer_operators(model, seq_len, act_bytes, attention_impl, moe_layer=True, qkv_fused=qkv_fused)
        moe_layer = OpTable.from_operators([op for op in ops if op.sharding != "expert"])
        experts = OpTable.from_operators([op for op in ops if op.sharding == "expert"])
    embedding = head = None
    if model.has_embeddings:
        embedding = OpTable.from_operators(embedding_operators(model, seq_len, act_bytes))
        head = OpTable.from_operators(head_operators(model, seq_len, act_bytes))
    return ModelTables(model=model, seq_len=seq_len, act_bytes=act_bytes,
                       attention_impl=attention_impl, layer=layer, embedding=embedding, head=head,
                       moe_layer=moe_layer, experts=experts, qkv_fused=qkv_fused)


@lru_cache(maxsize=256)
def stream_tables(model: ModelSpec, seq_len: int, act_bytes: int, stream: str, qkv_fused: bool,
                   masked_share: float = 0.0) -> ModelTables:
    blocks = {b: OpTable.from_operators(stream_operators(stream, b, model, seq_len, masked_share))
              for b in ("layer", "embedding", "head")}
    return ModelTables(model=model, seq_len=seq_len, act_bytes=act_bytes, attention_impl="flash", layer=blocks["layer"],
                       embedding=blocks["embedding"], head=blocks["head"], qkv_fused=qkv_fused, op_stream=stream)


def runtime_tables(model: ModelSpec, workload, runtime) -> ModelTables:
    """The tables a runtime's step is priced from: its captured operator stream for this
    architecture (Runtime.op_stream, graph/opstream.py) where one was captured for the workload's
    dtype and attention, else the hand-written graph with the runtime's QKV layout."""
    stream = stream_for(model, runtime.op_stream) if runtime.op_stream else ""
    if stream and workload.dtype in STREAM_DTYPES and workload.attention_impl == "flash":
        masked = explicit_mask_share(model, workload.seq_len) if runtime.masks_windowed_attention else 0.0
        return stream_tables(model, workload.seq_len, workload.activation_bytes, stream, runtime.qkv_fused, masked)
    return model_tables(model, workload.seq_len, workload.activation_bytes, workload.attention_impl, runtime.qkv_fused)
