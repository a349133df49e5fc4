"""TensorRT-LLM's MoE backend (ServingEngine.moe_backend): a row's `moe_config: backend: TRTLLM` runs the
experts as TRTLLMGenFusedMoE, priced at the device's TRTLLM-Gen MoE fit with its per-step token tile;
the default (CUTLASS) keeps the grouped-GEMM fit, and devices without the fit are left alone."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_gemm_fits
from autotune.cost.serving_step import ReplicaShape, serving_cluster, step_model, trtllm_gen_moe
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.serving_engine import ServingEngine

BLOGS = Path(__file__).parent / "data" / "trtllm_blogs_check.csv"


def _rows() -> dict[str, dict]:
    with BLOGS.open(newline="") as handle:
        return {r["id"]: r for r in csv.DictReader(handle)}


def test_notes_select_the_trtllm_moe_backend():
    rows = _rows()
    assert case_from_row(rows["trtblog-001"]).deployment.runtime.serving.moe_backend == "trtllm"  # moe_config: backend: TRTLLM
    assert case_from_row(rows["trtblog-007"]).deployment.runtime.serving.moe_backend == ""  # CUTLASS, the 1.0 default
    row = dict(rows["trtblog-007"], notes="trtllm-bench ... --moe_backend TRTLLM")
    assert case_from_row(row).deployment.runtime.serving.moe_backend == "trtllm"


def test_sglang_flashinfer_trtllm_runner_selects_the_trtllm_gen_kernels():
    """SGLang's --moe-runner-backend flashinfer_trtllm calls FlashInfer's TRTLLM-Gen fused MoE: the same kernels."""
    with (Path(__file__).parent / "data" / "inferencex_b300_check.csv").open(newline="") as handle:
        row = next(csv.DictReader(handle))
    assert "--moe-runner-backend flashinfer_trtllm" in row["notes"]
    assert case_from_row(row).deployment.runtime.serving.moe_backend == "trtllm"
    other = dict(row, notes=row["notes"].replace("--moe-runner-backend flashinfer_trtllm", "--moe-runner-backend triton"))
    assert case_from_row(other).deployment.runtime.serving.moe_backend == ""


def test_the_backend_is_tensorrt_llm_s_own():
    with pytest.raises(AutotuneError, match="moe_backend"):
        ServingEngine(engine="vllm", version="0.9", moe_backend="trtllm")
    with pytest.raises(AutotuneError, match="moe_backend"):
        ServingEngine(engine="tensorrt-llm", version="1.0", moe_backend="fast")


def _decode_s(step, decodes: int) -> float:
    return step.gpu_s(decodes=decodes, context=1024.0 * decodes, prefill_tokens=0, pairs=0.0, sampled=decodes)


def test_trtllm_gen_experts_decode_a_few_tokens_faster_on_b200():
    """DeepSeek-R1 NVFP4 on 8 B200 (TP8, MoE EP2 x TP4): the TRTLLM-Gen MoE, measured at 20-30 us a layer
    for one token against 70-100 us for CUTLASS, cuts the batch-1 step by more than a quarter."""
    model, cluster = resolve_model("deepseek-v3"), load_cluster("dgx-b200").for_gpus(8)
    kw = dict(weight_dtype="nvfp4", kv_bytes=2.0, max_tokens=64, max_sampled=64, nvfp4_gemm_fit="linear")
    cutlass = step_model(model, cluster, ReplicaShape(tp=8, ep=2), **kw)
    trtllm = step_model(model, cluster, ReplicaShape(tp=8, ep=2), moe_backend="trtllm", **kw)
    assert _decode_s(trtllm, 1) < 0.75 * _decode_s(cutlass, 1)
    assert all(_decode_s(trtllm, n) < _decode_s(cutlass, n) for n in (4, 16, 64))
    assert trtllm.weight_bytes_per_gpu == cutlass.weight_bytes_per_gpu


def test_devices_without_the_fit_keep_the_engine_s_moe():
    h200 = load_cluster("dgx-h200")
    assert not trtllm_gen_moe(h200.device, "fp8")
    assert serving_cluster(h200, "linear", False, "trtllm") is serving_cluster(h200, "linear", False, "")
    for name in ("dgx-b200", "gb200-nvl72", "dgx-b300"):
        blackwell = load_cluster(name)
        assert trtllm_gen_moe(blackwell.device, "nvfp4")
        experts = serving_cluster(blackwell, "linear", False, "trtllm").device.compute[("expert_gemm", "nvfp4")]
        assert experts is blackwell.device.compute[("serving_moe_gemm_trtllm_gen", "nvfp4")]


def test_fused_allreduce_drops_the_layer_norms_and_residuals_under_tp_only():
    """TensorRT-LLM 1.0 runs the residual adds and RMSNorms inside its TP all-reduces: a TP decode step
    is shorter by those kernels, a TP1 step (no all-reduce) or a small model's (hidden <= 4096) unchanged."""
    from autotune.spec.runtime import load_runtime

    assert load_runtime("tensorrt-llm-1.0").serving.allreduce_norm_fusion
    assert not load_runtime("tensorrt-llm-0.17").serving.allreduce_norm_fusion
    kw = dict(weight_dtype="fp8", kv_bytes=1.0, max_tokens=8, max_sampled=8)
    h200 = load_cluster("dgx-h200")
    for name, tp, faster in (("llama3-70b", 4, True), ("llama3-70b", 1, False), ("llama3-8b", 2, False)):
        model, cluster = resolve_model(name), h200.for_gpus(tp)
        plain = step_model(model, cluster, ReplicaShape(tp=tp), **kw)
        fused = step_model(model, cluster, ReplicaShape(tp=tp), allreduce_norm_fusion=True, **kw)
        if faster:  # four norm / residual kernels a layer, a few microseconds each at one token
            assert 0 < _decode_s(plain, 1) - _decode_s(fused, 1) < 0.2 * _decode_s(plain, 1)
        else:
            assert _decode_s(fused, 1) == _decode_s(plain, 1)


def test_trtllm_gen_moe_routes_inside_its_kernel():
    """The TRTLLM-Gen MoE takes the router's logits: no separate top-k kernel in the layer, the rest kept."""
    from autotune.cost.serving_experts import routing_in_kernel
    from autotune.graph.table import model_tables

    layer = model_tables(resolve_model("deepseek-v3"), 1, 2, "flash").moe_layer
    fused = routing_in_kernel(layer)
    assert "router_topk" in layer.names and "router_topk" not in fused.names
    assert [n for n in layer.names if n != "router_topk"] == list(fused.names)


def test_sglang_picks_the_trtllm_gen_moe_for_deepseek_on_blackwell_unless_told_otherwise():
    """SGLang 0.5.6+ server_args: DeepseekV3ForCausalLM on SM100 at FP8 / NVFP4, runner auto, no all-to-all
    backend -> flashinfer_trtllm; another runner or DeepEP keeps its own."""
    from autotune.cost.serving_eval import ServingDeployment, engine_moe_backend
    from autotune.spec.runtime import load_runtime

    sglang, cluster = load_runtime("sglang"), load_cluster("dgx-b300")
    deepseek = resolve_model("deepseek-v3")
    dep = ServingDeployment(model=deepseek, cluster=cluster, runtime=sglang, tp=8, ep=8, weight_dtype="nvfp4")
    assert sglang.serving.moe_backend == "" and engine_moe_backend(dep) == "trtllm"
    assert engine_moe_backend(ServingDeployment(model=resolve_model("qwen3-235b-a22b"), cluster=cluster, runtime=sglang,
                                                tp=8, ep=8, weight_dtype="nvfp4")) == ""
    assert engine_moe_backend(ServingDeployment(model=deepseek, cluster=cluster, runtime=load_runtime("sglang-0.4"),
                                                tp=8, ep=8, weight_dtype="nvfp4")) == ""
    with (Path(__file__).parent / "data" / "inferencex_b300_check.csv").open(newline="") as handle:
        row = next(csv.DictReader(handle))
    for flag in ("--moe-runner-backend flashinfer_cutlass", "--moe-a2a-backend deepep"):
        other = dict(row, notes=row["notes"].replace("--moe-runner-backend flashinfer_trtllm", flag))
        assert engine_moe_backend(case_from_row(other).deployment) == ""
    bare = dict(row, notes=row["notes"].replace("--moe-runner-backend flashinfer_trtllm", ""))
    assert engine_moe_backend(case_from_row(bare).deployment) == "trtllm"


def test_a_replicas_gemm_fits_are_its_step_models():
    """serving_eval.replica_gemm_fits (the kernel-comparison scripts' cluster): SGLang's own pick of the TRTLLM-Gen
    MoE for DeepSeek NVFP4 on B200 takes that kernel's fit for the experts; on H200 (no fit) the backend is off."""
    with (Path(__file__).parent / "data" / "sglang_newer_check.csv").open(newline="") as handle:
        rows = {r["id"]: r for r in csv.DictReader(handle)}
    b200 = case_from_row(rows["sglnew-025"]).deployment  # DeepSeek-V3 NVFP4, B200
    cluster, rate, backend = replica_gemm_fits(b200)
    assert (rate, backend) == ("nvfp4", "trtllm")
    assert cluster.device.compute[("expert_gemm", "nvfp4")] is b200.cluster.device.compute[("serving_moe_gemm_trtllm_gen", "nvfp4")]
    _, rate, backend = replica_gemm_fits(case_from_row(rows["sglnew-017"]).deployment)  # DeepSeek-V3 FP8, H200
    assert (rate, backend) == ("fp8", "")
