"""The routed experts' output biases (GPT-OSS): TEGroupedMLP._apply_bias, measured and priced (cost/moe.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cost import moe as moe_cost
from autotune.cost.moe import expert_layer_cost
from autotune.cost.stage import StageContext
from autotune.graph import model_tables
from autotune.graph.moe_ops import CLAMP_BYTES_PER_ELEMENT
from autotune.plan.plan import StagePlan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload, TrainingWorkload
from moe_models import MIXTRAL_8X7B

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "docs" / "measurements" / "moe_bias_traffic_2026-11-25.json"
CLUSTER = load_cluster("dgx-b200")
GPT_OSS = load_preset("gpt-oss-120b")


def _ctx(model=GPT_OSS, workload=None, micro_batch=1):
    w = workload or TrainingWorkload(global_batch=256, seq_len=4096, dtype="bf16")
    return StageContext(tables=model_tables(model, 4096, 2), workload=w, runtime=Runtime(name="neutral"),
                        cluster=CLUSTER.for_gpus(8),
                        micro_batch=micro_batch, num_microbatches=16)


def _stage(ep=8):
    return StagePlan(layers=(0, 36), has_embedding=True, has_head=True, num_gpus=8, tp=1, cp=1, dp=8,
                     sequence_parallel=False, ep=ep, etp=1)


def test_bias_free_moe_and_inference_add_nothing():
    assert moe_cost._expert_bias_s(_ctx(MIXTRAL_8X7B), 1e5, 8.0) == (0.0, 0.0)
    assert moe_cost._expert_bias_s(_ctx(GPT_OSS.with_changes(ffn_bias=False)), 1e5, 8.0) == (0.0, 0.0)
    serve = _ctx(workload=InferenceWorkload(batch=1, prompt_len=128, output_len=8))
    assert moe_cost._expert_bias_s(serve, 1e5, 8.0) == (0.0, 0.0)


def test_gpt_oss_bias_add_grows_with_the_routed_rows_and_the_local_experts():
    """Bytes in proportion to the rows (the measured bytes per fc2 output element), one kernel latency per
    launch: two per local expert forward, six backward, plus the fixed ones."""
    ctx = _ctx()
    fit = CLUSTER.device.memory_regression("stream")
    eff = CLUSTER.device.kernel_efficiency
    fwd1, bwd1 = moe_cost._expert_bias_s(ctx, 1e5, 16.0)
    fwd4, bwd4 = moe_cost._expert_bias_s(ctx, 4e5, 16.0)
    assert bwd1 > fwd1 > 0.0
    for p, t1, t4 in (("fwd", fwd1, fwd4), ("bwd", bwd1, bwd4)):
        per_expert, fixed = moe_cost.EXPERT_BIAS_KERNELS[p]
        launches = (per_expert * 16 + fixed) * fit.latency_s / eff
        assert t4 - launches == pytest.approx(4 * (t1 - launches), rel=1e-9)
        assert t1 - launches == pytest.approx(1e5 * 2880 * moe_cost.EXPERT_BIAS_BYTES_PER_ELEMENT[p]
                                              * fit.seconds_per_unit / eff, rel=1e-9)
    more_experts = moe_cost._expert_bias_s(ctx, 1e5, 32.0)
    assert more_experts[0] - fwd1 == pytest.approx(2 * 16 * fit.latency_s / eff, rel=1e-9)
    assert more_experts[1] - bwd1 == pytest.approx(6 * 16 * fit.latency_s / eff, rel=1e-9)


def test_the_layer_pays_the_bias_add_on_its_busiest_rank():
    ctx = _ctx()
    with_bias = expert_layer_cost(ctx, _stage())
    rows_busy = 4096 * 4 * with_bias.imbalance
    fwd, bwd = moe_cost._expert_bias_s(ctx, rows_busy, with_bias.active_experts)
    original = moe_cost._expert_bias_s
    try:
        moe_cost._expert_bias_s = lambda *a: (0.0, 0.0)
        without = expert_layer_cost(ctx, _stage())
    finally:
        moe_cost._expert_bias_s = original
    assert with_bias.fwd_s - without.fwd_s == pytest.approx(fwd, rel=1e-6)
    assert with_bias.bwd_s - without.bwd_s == pytest.approx(bwd, rel=1e-6)


def _act_bytes_per_fc1_element(model) -> tuple:
    """(forward, backward, saved) bytes of the experts' activation per element of the fc1 output."""
    t = model_tables(model, 256, 2).experts
    i = t.names.index("expert_act")
    elements = 256 * model.num_experts_per_token * 2 * model.expert_ffn_hidden_size
    fwd = (t.in_bytes[i] + t.out_bytes[i]) / elements
    return fwd, fwd * t.bwd_bytes_factor[i], t.saved_bytes[i] / elements


def test_gpt_oss_clamp_adds_its_eager_kernels_to_the_fused_activation():
    """weighted_bias_quick_geglu_impl clamps the fc1 output with eager kernels before the fused kernel
    (whose boundary is weighted SwiGLU's: 3 bytes per fc1 element forward, 5 backward) and keeps the
    unclamped output for the clamp's backward."""
    plain = _act_bytes_per_fc1_element(GPT_OSS.with_changes(expert_act_clamp=0.0))
    clamped = _act_bytes_per_fc1_element(GPT_OSS)
    assert plain == pytest.approx((3.0, 5.0, 2.0))
    assert clamped == pytest.approx((3.0 + CLAMP_BYTES_PER_ELEMENT["fwd"], 5.0 + CLAMP_BYTES_PER_ELEMENT["bwd"], 4.0))
    assert _act_bytes_per_fc1_element(load_preset("qwen3-30b-a3b")) == pytest.approx((3.0, 5.0, 2.0))


def _check(summary: dict, rel: float) -> None:
    for p in ("fwd", "bwd"):
        clamp = summary["quick_geglu"][p]["bytes_per_element"] - summary["swiglu"][p]["bytes_per_element"]
        assert clamp == pytest.approx(CLAMP_BYTES_PER_ELEMENT[p], rel=rel)
        measured = summary["apply_bias"][p]["bytes_per_element"]
        assert measured == pytest.approx(moe_cost.EXPERT_BIAS_BYTES_PER_ELEMENT[p], rel=rel)
        kernels = summary["apply_bias"]["kernels"][p]
        assert (kernels["per_expert"], kernels["fixed"]) == moe_cost.EXPERT_BIAS_KERNELS[p]


def test_priced_bytes_and_kernels_are_the_shipped_measurement():
    result = json.loads(MEASURED.read_text())
    assert result["megatron_core"] == "0.16.1"
    _check(result["summary"], rel=1e-3)  # (the probabilities add 4 bytes per row: 1/720 per element)


def test_megatron_apply_bias_moves_what_the_cost_prices():
    """Run TEGroupedMLP._apply_bias (small shape) under profilers/moe_bias_traffic.py."""
    pytest.importorskip("megatron.core")
    out = subprocess.run([sys.executable, "-m", "profilers.moe_bias_traffic", "--small"], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    summary = json.loads(out.strip().splitlines()[-1])["summary"]
    _check(summary, rel=0.01)  # hidden 256: the probabilities' 4 bytes per row are 1.6% of a byte per element
    # weighted SwiGLU's fused kernel moves what the graph's expert_act prices without a clamp
    assert summary["swiglu"]["fwd"]["bytes_per_element"] == pytest.approx(3.0, rel=0.01)
    assert summary["swiglu"]["bwd"]["bytes_per_element"] == pytest.approx(5.0, rel=0.01)
