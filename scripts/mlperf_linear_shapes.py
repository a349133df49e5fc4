"""One layer's NVFP4 linears at a model's tensor-parallel shapes: aiconfigurator's measured op against the device's
serving linear fit (regressions.serving_gemm: nvfp4_gemm_fit "linear", the fp4 GEMM plugin's engines) and the square
GEMM sweep over kernel_efficiency (regressions.gemm: what an engine built without the plugin is priced at), each
linear's microseconds and the layer's sum (docs/serving.md, GB200 x72 llama3.1-405b Interactive). The measured op at
a shape off the table's grid is interpolated log-linearly in N and K at the table's M. A diagnosis, not a fit.

usage: python scripts/mlperf_linear_shapes.py PARQUET DEVICE [--m=33,1024] [--shapes=4608x16384,16384x4096,...]
e.g.   git --git-dir=/work/.mirror/ai-dynamo+aiconfigurator/repo show HEAD:aic-core/src/aiconfigurator_core/systems/\
data/gb200/gemm/trtllm/1.3.0rc10/gemm_perf.parquet > /tmp/gb200.parquet
       python scripts/mlperf_linear_shapes.py /tmp/gb200.parquet gb200
(default shapes: Llama 3.1 405B at TP 4, N x K a GPU: QKV, O, gate/up, down; needs pandas + pyarrow)"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from autotune.spec.hardware_data import load_device

_LLAMA405_TP4 = "4608x16384,16384x4096,26624x16384,16384x13312"
_WEIGHT_BYTES = 4.5 / 8  # NVFP4: 4 bits and an FP8 scale per 16 weights


def _option(name: str, default: str) -> str:
    return next((a.split("=", 1)[1] for a in sys.argv if a.startswith(f"--{name}=")), default)


def measured_s(table: pd.Series, m: int, n: int, k: int) -> float:
    """The op's median seconds at (m, n, k), log-linear between the grid's neighbouring N and K."""
    grid_n, grid_k = sorted({i[1] for i in table.index}), sorted({i[2] for i in table.index})

    def side(v: int, grid: list[int]) -> tuple[int, int, float]:
        lo, hi = max(g for g in grid if g <= v), min(g for g in grid if g >= v)
        return lo, hi, 0.0 if lo == hi else float(np.log(v / lo) / np.log(hi / lo))

    (n0, n1, wn), (k0, k1, wk) = side(n, grid_n), side(k, grid_k)
    log = {(a, b): np.log(table.loc[(m, a, b)]) for a in (n0, n1) for b in (k0, k1)}
    value = (1 - wn) * (1 - wk) * log[(n0, k0)] + wn * (1 - wk) * log[(n1, k0)] + (1 - wn) * wk * log[(n0, k1)] \
        + wn * wk * log[(n1, k1)]
    return float(np.exp(value)) * 1e-3  # the table's latency is in ms


def fit_s(device, op_class: str, m: int, n: int, k: int) -> float:
    """The fit's seconds for one GEMM, as cost/serving_ops.py ops_s takes its arms (compute; the weights' stream
    at the memory fit; the serial main loop), the activations' bytes left out."""
    fit, spb = device.compute[(op_class, "nvfp4")], device.memory.seconds_per_unit
    weights = n * k * _WEIGHT_BYTES
    time = max(fit.latency_s + 2.0 * m * n * k * fit.seconds_per_unit, weights * spb,
               fit.serial_latency_s + k * fit.seconds_per_reduction + weights * spb if fit.seconds_per_reduction else 0.0)
    return time if fit.in_engine else time / device.kernel_efficiency


def main() -> None:
    path, name = [a for a in sys.argv[1:] if not a.startswith("--")]
    device = load_device(name)
    rows = pd.read_parquet(path)
    table = rows[rows.gemm_dtype == "nvfp4"].groupby(["m", "n", "k"]).latency.median()
    shapes = [tuple(int(x) for x in s.split("x")) for s in _option("shapes", _LLAMA405_TP4).split(",")]
    for m in (int(x) for x in _option("m", "33,1024").split(",")):
        total = np.zeros(3)
        for n, k in shapes:
            us = 1e6 * np.array([measured_s(table, m, n, k), fit_s(device, "serving_gemm", m, n, k),
                                 fit_s(device, "gemm", m, n, k)])
            total += us
            print(f"M={m} N={n} K={k}: measured {us[0]:.1f} us, serving_gemm fit {us[1]:.1f}, sweep / eff {us[2]:.1f}")
        print(f"M={m} layer: measured {total[0]:.1f} us, serving_gemm fit {total[1]:.1f}, sweep / eff {total[2]:.1f}")


if __name__ == "__main__":
    main()
