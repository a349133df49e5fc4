"""Achieved rate of every measured point of a profile (TFLOP/s for GEMM, bmm and attention
points, GB/s for memory kernels), with its share of a datasheet peak where one is given.

    python scripts/profile_rates.py autotune/data/devices/h100-sxm-measured.json \
        --peak bf16=989.4e12 --peak fp16=989.4e12 --peak fp8=1978.9e12 --peak fp8_rowwise=1978.9e12

Pure Python on the profile's kept measurements (the median of each point's steps); used for
the tables of docs/h100-measured.md.
"""

from __future__ import annotations

import argparse
import json
import statistics


def _peaks(items: list[str]) -> dict[str, float]:
    return {k: float(v) for k, v in (item.split("=", 1) for item in items)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--peak", action="append", default=[], help="dtype=FLOP/s datasheet peak (repeatable)")
    parser.add_argument("--min-amount", type=float, default=0.0, help="summary over points with at least this work")
    args = parser.parse_args()
    peaks = _peaks(args.peak)
    groups: dict[str, list[dict]] = {}
    for m in json.load(open(args.profile))["measurements"]:
        groups.setdefault(m["group"], []).append(m)
    for group, points in sorted(groups.items()):
        memory = group.startswith("memory")
        unit, scale = ("GB/s", 1e9) if memory else ("TFLOP/s", 1e12)
        peak = peaks.get(group.split("/")[-1]) if not memory else None
        print(f"{group}")
        rates = []
        for m in sorted(points, key=lambda p: p["amount"]):
            rate = m["amount"] / m["median_s"]
            if m["amount"] >= args.min_amount:
                rates.append(rate)
            share = f" {100 * rate / peak:5.1f}% of peak" if peak else ""
            print(f"  {m['label']:36s} {m['median_s'] * 1e6:10.1f} us {rate / scale:9.1f} {unit}{share}")
        if rates:
            print(f"  summary over {len(rates)} points: median {statistics.median(rates) / scale:.1f}, "
                  f"max {max(rates) / scale:.1f} {unit}")


if __name__ == "__main__":
    main()
