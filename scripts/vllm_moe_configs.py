"""Split an aiconfigurator vLLM MoE table (moe_perf.parquet) by whether vLLM's Triton fused_moe ran a tuned
tile config for the shape, and fit each half as scripts/fit_engine_moe.py fits the whole.

vLLM's fused_moe looks its tiles up in a JSON file shipped per (E, N, device, dtype[, block]) in
vllm/model_executor/layers/fused_moe/configs/ (fused_moe.py get_config_file_name / get_moe_configs: E the
rank's local experts, N = w2.shape[2] the intermediate size per partition, dtype "fp8_w8a8" for FP8 and
none for BF16, ",block_shape=[128,128]" for block-scaled FP8) and otherwise logs "Using default MoE config.
Performance might be sub-optimal!" and runs get_default_config's tiles (vllm-0.11.0 and 0.14.0 wheels).

usage: python scripts/vllm_moe_configs.py PARQUET WHEEL_OR_LIST DEVICE_NAME CLUSTER MOE_DTYPE DTYPE
           [MOE_TP[,MOE_TP...]] [--tokens=LO..HI] [--start=US,TFLOPS] [--fit=US,TFLOPS] [--masked-rows=] [--by-ep=]
e.g.   python scripts/vllm_moe_configs.py h100_sxm/moe/vllm/0.14.0/moe_perf.parquet vllm-0.14.0-...whl \\
           NVIDIA_H100_80GB_HBM3 dgx-h100 fp8_block fp8 1
WHEEL_OR_LIST: a vLLM wheel (its configs/ listing is read) or a text file of config file names;
--fit prices both halves at a given fit (e.g. the profile's) instead of fitting them; --masked-rows= prices
moe_ep > 1 rows with the expert_map's work on every routed row (cost/expert_map.py); --by-ep= splits the rows
by moe_ep (1, 2-4, 8+) instead of by tuned config.
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys
import zipfile

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from fit_engine_moe import fit, groups, pricer  # noqa: E402

_CONFIG_DIR = "vllm/model_executor/layers/fused_moe/configs/"
_DTYPE_SELECTOR = {"bfloat16": "", "fp8": ",dtype=fp8_w8a8", "fp8_block": ",dtype=fp8_w8a8,block_shape=[128,128]"}


def config_names(path: str) -> set[str]:
    """The tuned-config file names a wheel ships (or a listing, one name a line)."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as wheel:
            return {n[len(_CONFIG_DIR):] for n in wheel.namelist() if n.startswith(_CONFIG_DIR) and n.endswith(".json")}
    return {line.strip() for line in open(path) if line.strip()}


def tuned(key: tuple, moe_dtype: str, device_name: str, names: set[str]) -> bool:
    """Whether vLLM finds a config file for one aiconfigurator shape (hidden, inter, topk, E, ep, tp)."""
    _, inter, _, e, ep, tp = (int(v) for v in key)
    return f"E={e // ep},N={inter // tp},device_name={device_name}{_DTYPE_SELECTOR[moe_dtype]}.json" in names


def report(label: str, rows, rel: np.ndarray) -> None:
    tokens = np.concatenate([tok for _, tok, _ in rows])
    print(f"{label}: rows {len(rel)} shapes {len(rows)} mean {rel.mean():+.2f} rms {np.sqrt((rel ** 2).mean()):.2f}")
    print("   mean rel by tokens:", {int(n): round(float(rel[tokens == n].mean()), 2)
                                     for n in (16, 64, 128, 512, 1024, 2048, 4096, 8192, 16384) if (tokens == n).any()})


def main() -> None:
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path, listing, device_name, cluster, moe_dtype, dtype = args[:6]
    moe_tps = tuple(int(v) for v in args[6].split(",")) if len(args) > 6 else (1,)
    lo, hi = (int(v) for v in flags.get("tokens", "16..16384").split(".."))
    names = config_names(listing)
    rows = groups(path, moe_dtype, moe_tps, "vllm_fused_moe", (lo, hi))
    time_s = pricer(cluster, dtype, "", "masked-rows" in flags)
    halves = {"tuned": [r for r in rows if tuned(r[0], moe_dtype, device_name, names)],
              "default": [r for r in rows if not tuned(r[0], moe_dtype, device_name, names)]}
    if "by-ep" in flags:
        halves = {f"moe_ep {lo}..{hi}": [r for r in rows if lo <= int(r[0][4]) <= hi] for lo, hi in ((1, 1), (2, 4), (8, 512))}
    for label, part in halves.items():
        print(f"== {label}: {sorted({(int(k[3]) // int(k[4]), int(k[1]) // int(k[5])) for k, _, _ in part})}")
        if not part:
            continue
        if "fit" in flags:
            lat_us, tflops = (float(v) for v in flags["fit"].split(","))
            rel = np.concatenate([time_s(lat_us * 1e-6, 1e-12 / tflops, key, tok) / t - 1.0 for key, tok, t in part])
            report(f"{label} at {lat_us} us, {tflops} TFLOP/s", part, rel)
            continue
        lat, spf, rel = fit(part, time_s, tuple(float(v) for v in flags.get("start", "25,500").split(",")))
        report(f"{label} fit: latency_s {lat:.3e} seconds_per_flop {spf:.3e} asymptote {1e-12 / spf:.0f} TFLOP/s",
               part, rel)


if __name__ == "__main__":
    main()
