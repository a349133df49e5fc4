"""An eager prompt step's host issue (cost/serving_eval.py eager_issue_s): each layer's operators by its
own structure (cost/host.py layer_fwd_ops), so an MLA + MoE model issues more per layer than a dense one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.cost.host import LAYER_OPS, MLA_EXTRA_FWD_OPS, layer_fwd_ops, op_host_s
from autotune.cost.serving_eval import ServingDeployment, eager_issue_s, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

FWD = LAYER_OPS["fwd"]


def test_a_dense_layer_issues_attention_and_mlp():
    llama = resolve_model("llama3-8b")
    assert all(layer_fwd_ops(llama, i) == FWD["attn"] + FWD["mlp"] for i in range(llama.num_layers))


def test_deepseek_layers_add_mla_and_their_moe_block():
    ds = resolve_model("deepseek-v3")
    attn = FWD["attn"] + MLA_EXTRA_FWD_OPS
    moe = FWD["moe_router"] + FWD["moe_preprocess"] + FWD["moe"] + FWD["expert"] + FWD["mlp"]  # shared experts
    counts = [layer_fwd_ops(ds, i) for i in range(ds.num_layers)]
    assert counts[:ds.first_k_dense_layers] == [attn + FWD["mlp"]] * ds.first_k_dense_layers
    assert counts[ds.first_k_dense_layers:] == [attn + moe] * (ds.num_layers - ds.first_k_dense_layers)


def test_eager_issue_sums_the_layers_at_the_hosts_operator_time():
    h200 = load_cluster("dgx-h200")
    ds = resolve_model("deepseek-v3")
    sglang = load_runtime("sglang")
    dep = ServingDeployment(model=ds, cluster=h200, runtime=sglang, tp=8, weight_dtype="fp8")
    ops = sum(layer_fwd_ops(ds, i) for i in range(ds.num_layers))
    assert eager_issue_s(dep) == pytest.approx(ops * op_host_s(h200) * sglang.serving.eager_op_host_scale)
    # per layer, DeepSeek-V3 issues more than twice what a dense grouped-query layer does
    assert ops / ds.num_layers > 2 * (FWD["attn"] + FWD["mlp"])


def test_a_lone_short_prompt_waits_for_the_host():
    """One 128-token prompt at a time: the GPU's prompt step is short, so the first token comes no
    sooner than the host's issue of every layer."""
    dep = ServingDeployment(model=resolve_model("deepseek-v3"), cluster=load_cluster("dgx-h200"),
                            runtime=load_runtime("sglang"), tp=8, weight_dtype="fp8")
    run = run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=128, output_len=4))
    assert metric_value(run.trace, "ttft_mean") >= eager_issue_s(dep)


def _with_scale(runtime, scale):
    return replace(runtime, serving=replace(runtime.serving, eager_op_host_scale=scale))


def test_the_engines_operator_scale_multiplies_the_issue_and_must_be_positive():
    sglang = load_runtime("sglang")
    deps = [ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                              runtime=_with_scale(sglang, scale), tp=1) for scale in (1.0, 2.0)]
    assert eager_issue_s(deps[1]) == pytest.approx(2 * eager_issue_s(deps[0]))
    assert load_runtime("vllm-0.6").serving.eager_op_host_scale == 1.0  # no measurement of its own: Megatron's
    for bad in (0.0, -1.0, "fast"):
        with pytest.raises(AutotuneError, match="eager_op_host_scale"):
            _with_scale(sglang, bad)
