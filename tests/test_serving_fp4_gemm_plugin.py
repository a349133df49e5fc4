"""A TensorRT engine built with gemm_plugin nvfp4 runs its NVFP4 dense linears through the plugin GEMM
(nvfp4_gemm_fit "linear_dense": TensorRT-LLM's measured Linear) while its MoE experts keep the MixtureOfExperts
plugin, priced at the sweep as without it; MLPerf v5.0's B200 Mixtral Server engine is the one system so built."""

from __future__ import annotations

from autotune.calibrate.serving_systems import published_system
from autotune.cost.serving_step import ReplicaShape, serving_cluster, step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model


def test_linear_dense_moves_the_dense_gemms_and_keeps_the_experts_at_the_sweep():
    b200 = load_cluster("dgx-b200")
    compute = b200.device.compute
    dense = serving_cluster(b200, "linear_dense").device
    assert dense.regression("gemm", "nvfp4") is compute[("serving_gemm", "nvfp4")]
    assert dense.compute[("expert_gemm", "nvfp4")] is compute[("gemm", "nvfp4")]
    whole = serving_cluster(b200, "linear").device  # "linear" moves the experts to the measured MoE layer too
    assert whole.compute[("expert_gemm", "nvfp4")] is compute[("serving_moe_gemm", "nvfp4")]
    assert serving_cluster(load_cluster("dgx-h100"), "linear_dense") is load_cluster("dgx-h100")  # no NVFP4 fits


def test_a_mixtral_step_under_the_plugin_sits_between_the_sweep_and_the_whole_linear_fit():
    """Mixtral 8x7B NVFP4, 4,096 tokens on one B200: the attention projections at the plugin's fit make the
    step slower than the sweep's, the experts at the sweep keep it faster than with the measured MoE too."""
    model, one = resolve_model("mixtral-8x7b"), load_cluster("dgx-b200").for_gpus(1)
    kw = dict(weight_dtype="nvfp4", kv_bytes=1.0, max_tokens=4096, max_sampled=1)
    steps = {fit: step_model(model, one, ReplicaShape(tp=1), nvfp4_gemm_fit=fit, **kw).linear_s[4096]
             for fit in ("sweep", "linear_dense", "linear")}
    assert steps["sweep"] < steps["linear_dense"] < steps["linear"]


def test_only_the_mixtral_b200_server_engine_takes_the_plugin_fit():
    def fit(scenario: str) -> object:
        system = published_system("mlperf-nvidia-5.0", "mixtral-8x7b", "B200-SXM-180GB", 8, f"{scenario} scenario")
        return system.get("nvfp4_gemm_fit")
    assert fit("Server") == "linear_dense"
    assert fit("Offline") is None
