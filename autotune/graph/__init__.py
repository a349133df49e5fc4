"""Operator graphs of transformer blocks and their array form for the cost model."""

from autotune.graph.operators import Operator, embedding_graph, head_graph, layer_graph, operators
from autotune.graph.table import ModelTables, OpTable, model_tables

__all__ = [
    "Operator", "OpTable", "ModelTables", "layer_graph", "embedding_graph", "head_graph",
    "operators", "model_tables",
]
