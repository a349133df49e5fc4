"""A serving row's routed-expert layer time as the fit prices it (grouped-GEMM fit on balanced routing times the
modelled busiest-rank skew, cost/serving_experts.py) beside TensorRT-LLM's measured MoE layer at power-law routing
(autotune/data/trtllm_moe.toml, cost/serving_moe_table.py), per token count entering the layer: the comparison
docs/serving.md quotes for the measured-table pricing. A diagnostic; it changes nothing.

usage: python scripts/compare_trtllm_moe.py CSV ROW_ID TOKENS[,TOKENS...]
"""

from __future__ import annotations

import csv
import sys

import numpy as np

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_collectives import moe_comm_dtype
from autotune.cost.serving_eval import replica_gemm_fits
from autotune.cost.serving_experts import experts_s, routed_moves
from autotune.cost.serving_moe_table import measured_moe_key, measured_moe_s
from autotune.cost.serving_ops import select_ops
from autotune.cost.serving_step import ReplicaShape
from autotune.graph.table import model_tables


def main() -> None:
    path, row_id, counts = sys.argv[1], sys.argv[2], sys.argv[3]
    dep = case_from_row({r["id"]: r for r in csv.DictReader(open(path, encoding="utf-8"))}[row_id]).deployment
    engine, model = dep.runtime.serving, dep.model
    shape = ReplicaShape(tp=dep.tp, ep=dep.ep, attention_dp=dep.attention_dp, eplb=dep.eplb,
                         moe_comm_dtype=moe_comm_dtype(model, engine.engine, dep.dtype) if dep.attention_dp else "")
    cluster, rate, backend = replica_gemm_fits(dep)
    tables = model_tables(model, 1, 2, "flash")
    moves = select_ops(tables.moe_layer, routed_moves(tables.moe_layer))
    tokens = np.array([float(t) for t in counts.split(",")])
    fit = experts_s(tables.experts, moves, model, cluster, shape, dep.dtype, rate, tokens, backend)
    key = measured_moe_key(model, cluster.device.name, dep.dtype, backend, dep.tp, dep.ep, dep.eplb)
    measured = measured_moe_s(key, tokens) if key else np.full_like(tokens, np.nan)
    print(f"{row_id}: {dep.cluster.device.name} TP{dep.tp} EP{dep.ep} {dep.dtype}, table row {key or '(none)'}")
    for t, f, m in zip(tokens, fit, measured):
        print(f"  {t:7.0f} tokens: fit x skew {f * 1e3:7.3f} ms, measured {m * 1e3:7.3f} ms ({(m / f - 1) * 100:+.0f}%)")


if __name__ == "__main__":
    main()
