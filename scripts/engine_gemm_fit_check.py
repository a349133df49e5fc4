"""How a shipped engine-measured linear fit (regressions.serving_gemm*) prices the rows it was fitted on, as fitted and
over the device's kernel_efficiency (what the serving step did before Regression.in_engine): the mean and rms relative
error against aiconfigurator's measured op (M 16..16384, N, K 4096..65536: the fit's rows), overall and by M.

usage: python scripts/engine_gemm_fit_check.py PARQUET DEVICE FIT_CLASS DTYPE [--less-scale-transform=]
e.g.   python scripts/engine_gemm_fit_check.py .../h200_sxm/gemm/trtllm/1.2.0rc5/gemm_perf.parquet h200 serving_gemm fp8_block
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from fit_engine_nvfp4_linear import WEIGHT_BYTES, load, predict, scale_transform_s  # noqa: E402

from autotune.spec.hardware_data import load_device  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path, name, op_class, dtype = args
    offset = scale_transform_s(path) if "--less-scale-transform=" in sys.argv else 0.0
    device = load_device(name)
    fit, eff = device.compute[(op_class, dtype)], device.kernel_efficiency
    rows = load(path, dtype, offset)
    spb = device.memory.seconds_per_unit
    for label, scale in (("as fitted", 1.0), (f"over kernel_efficiency {eff}", 1.0 / eff)):
        time = predict(rows, fit.latency_s, fit.seconds_per_unit, spb)
        if fit.seconds_per_reduction:  # the serial main-loop arm, as fit_engine_nvfp4_linear.py --serial fits it
            weights = WEIGHT_BYTES[dtype] * rows.n * rows.k
            time = np.maximum(time, fit.serial_latency_s + rows.k * fit.seconds_per_reduction + weights * spb)
        rel = scale * time / rows.t - 1.0
        by_m = {int(m): round(float(r), 2) for m, r in rel.groupby(rows.m).mean().items() if m in (16, 64, 256, 1024, 4096, 16384)}
        print(f"{name} {op_class}.{dtype} {label}: {len(rows)} rows, mean {rel.mean():+.3f}, rms {np.sqrt((rel ** 2).mean()):.3f}; by M {by_m}")


if __name__ == "__main__":
    main()
