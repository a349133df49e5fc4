"""Sensitivity only (nothing shipped is fitted from it): `autotune check-published` with the serving kernels at
kernel efficiency 1.0 instead of the devices' training-fitted 0.84.

    python scripts/kernel_efficiency_sensitivity.py MODE tests/data/FILE.csv --json > out.json

MODE "gemm": the micro-benchmark GEMM fits (regressions.gemm: cuBLASLt sweeps, torch._scaled_mm, datasheet
estimates) at 1.0, their values times the device's efficiency that pricing divides back out; memory, attention and
the engine-measured fits as shipped. MODE "all": every device at 1.0, and the MoE fits that were fitted through the
pricing at 0.84 (regressions.serving_moe*: scripts/fit_engine_moe.py, fit_w4a16_stream.py) divided by it, so they
still price the module aiconfigurator measured."""

from __future__ import annotations

import dataclasses
import sys

from autotune.cli import dataclass_code

dataclass_code.install()
import autotune.spec.hardware_data as hd  # noqa: E402

_device_from_dict = hd.device_from_dict


def _scaled(fit, factor: float):
    return dataclasses.replace(fit, latency_s=fit.latency_s * factor, seconds_per_unit=fit.seconds_per_unit * factor)


def _at_one(mode: str):
    def device_from_dict(data, where="device"):
        device = _device_from_dict(data, where)
        eff = device.kernel_efficiency
        if mode == "gemm":
            return device.with_changes(compute={k: _scaled(f, eff) if k[0] == "gemm" else f for k, f in device.compute.items()})
        compute = {k: _scaled(f, 1.0 / eff) if k[0].startswith("serving_moe") else f for k, f in device.compute.items()}
        return device.with_changes(kernel_efficiency=1.0, compute=compute)
    return device_from_dict


def main() -> int:
    mode = sys.argv[1]
    if mode not in ("gemm", "all"):
        raise SystemExit(__doc__)
    hd.device_from_dict = _at_one(mode)
    from autotune.cli.main import main as cli

    return cli(["check-published", *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
