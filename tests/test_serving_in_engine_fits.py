"""GEMM fits made on an engine's own op (Regression.in_engine: aiconfigurator's timings of the engine's Linear,
fitted as measured by scripts/fit_engine_nvfp4_linear.py) are priced as fitted; every other fit keeps the
device's kernel_efficiency, the training-fitted share of micro-benchmark speed."""

from __future__ import annotations

import glob
import tomllib
from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.serving_ops import ops_s, select_ops
from autotune.cost.serving_step import serving_cluster
from autotune.errors import AutotuneError
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import regression_from_dict, load_cluster
from autotune.spec.presets import resolve_model


def test_the_flag_is_read_and_must_be_a_boolean():
    fit = {"latency_s": 6e-6, "seconds_per_flop": 2e-16}
    assert not regression_from_dict(fit, "fit", "seconds_per_flop").in_engine
    assert regression_from_dict(fit | {"in_engine": True}, "fit", "seconds_per_flop").in_engine
    with pytest.raises(AutotuneError, match="in_engine"):
        regression_from_dict(fit | {"in_engine": 1}, "fit", "seconds_per_flop")


def test_shipped_engine_linear_fits_are_flagged_and_fits_made_through_the_pricing_are_not():
    """serving_gemm* are fitted to the measured op with no efficiency in the fit; the MoE fits
    (fit_engine_moe.py, fit_w4a16_stream.py, vllm_moe_configs.py) are fitted through ops_s at the
    profile's efficiency, so their values already carry it."""
    seen = 0
    for path in glob.glob("autotune/data/devices/*.toml"):
        with open(path, "rb") as f:
            regressions = tomllib.load(f)["regressions"]
        for op_class, fits in regressions.items():
            for fit in fits.values() if op_class.startswith("serving") else ():
                assert fit.get("in_engine", False) == op_class.startswith("serving_gemm"), (path, op_class)
                seen += op_class.startswith("serving_gemm")
    assert seen >= 20


def _linear_s(cluster, fit: str, tokens: float) -> float:
    layer = model_tables(resolve_model("deepseek-v3"), 1, 2, "flash").moe_layer
    one = select_ops(layer, np.array([n == "shared_up" for n in layer.names]))
    return float(ops_s(one, cluster.device, "fp8", "fp8", np.array([tokens]), 8)[0])


@pytest.mark.parametrize("tokens", [1.0, 64.0, 8192.0])
def test_a_flagged_fit_prices_its_own_time_and_the_same_fit_unflagged_over_the_efficiency(tokens):
    """DeepSeek-V3's shared-expert up projection on H200 under TensorRT-LLM's block-scaled FP8 linear fit: at
    one token (memory and serial arms) and at many (FLOP arm) the flag removes exactly the efficiency."""
    cluster = serving_cluster(load_cluster("dgx-h200").for_gpus(8), "linear", True)
    fit = cluster.device.regression("gemm", "fp8")
    assert fit.in_engine
    plain = cluster.with_changes(device=cluster.device.with_changes(
        compute={**cluster.device.compute, ("gemm", "fp8"): replace(fit, in_engine=False)}))
    eff = cluster.device.kernel_efficiency
    assert eff < 1.0
    assert _linear_s(cluster, "linear", tokens) == pytest.approx(_linear_s(plain, "linear", tokens) * eff)
