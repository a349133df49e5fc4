"""An MLPerf Hopper row's priced output tokens/s (one replica, one draw, as check-published simulates it) with its FP8
linears at the GEMM sweep over kernel_efficiency or at TensorRT-LLM's measured FP8 linear (fp8_gemm_fit), with and
without gemm_swiglu_plugin's fused SwiGLU (gemm_swiglu_fusion): which engine change moves a row by how much
(issue 31, mlph46). A diagnostic, not a test; ratios between columns are what it is for.

    PYTHONPATH=. python scripts/mlperf_fp8_linear_variants.py tests/data/serving_runs.csv mlp41-001 mlp41-005 \\
        tests/data/mlperf_v5_0_nvidia.csv mlp50-035 mlp50-016
"""

from __future__ import annotations

import dataclasses
import sys

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving
from autotune.spec.json_file import read_csv_file

VARIANTS = {"sweep": dict(fp8_gemm_fit="sweep", gemm_swiglu_fusion=False),
            "linear": dict(fp8_gemm_fit="linear", gemm_swiglu_fusion=False),
            "linear+swiglu": dict(fp8_gemm_fit="linear", gemm_swiglu_fusion=True)}


def report(row: dict) -> str:
    case = case_from_row(row)
    dep, load, engine = case.deployment, case.load, case.deployment.runtime.serving
    rates = {}
    for name, settings in (("as priced", {}), *VARIANTS.items()):
        variant = dataclasses.replace(dep, runtime=dep.runtime.with_changes(serving=engine.with_changes(**settings)))
        trace = run_serving(variant, load).trace
        rates[name] = float(trace.output_len.sum()) / trace.duration_s
    base = rates["sweep"]
    cells = ", ".join(f"{name} {rate:.0f} ({rate / base - 1.0:+.1%})" for name, rate in rates.items())
    return f"{row['id']} {dep.runtime.name} {row['gpu']} (measured {row['value']} system): output tokens/s a replica {cells}"


def main(argv: list[str]) -> None:
    rows: dict[str, dict] = {}
    for arg in argv:
        if arg.endswith(".csv"):
            rows.update({r["id"]: r for r in read_csv_file(arg, "csv")[1]})
        else:
            print(report(rows[arg]))


if __name__ == "__main__":
    main(sys.argv[1:])
