"""The busiest expert-parallel rank's routed rows under skewed routing (cost/moe_skew.py)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.cost import serving_experts
from autotune.cost import serving_step as ss
from autotune.calibrate.serving_phrases import eplb_from_notes
from autotune.cost.moe_skew import DEEPSEEK_ALPHA, EPLB_SKEW, OTHER_MOE_ALPHA, busiest_rank_skew, routing_alpha
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model


def test_deepseek_at_ep32_reproduces_the_measured_hottest_rank():
    # TensorRT-LLM tech blog 4, Table 1: DeepSeek-R1, EP32, 1,024 routed rows a rank on average, no EPLB:
    # imbalance ratio (max - mean) / mean 1.564. Alpha 1.01 is aiconfigurator's latency-matched estimate
    # for DeepSeek (another source and dataset), so agreement is a check, not a fit.
    m = resolve_model("deepseek-v3")
    tokens = 1024 * 32 / m.num_experts_per_token  # the step's tokens that route 1,024 rows to each of 32 ranks
    assert busiest_rank_skew(m, 32, [tokens])[0] == pytest.approx(2.564, rel=0.05)


def test_the_rule_by_router():
    assert routing_alpha(resolve_model("deepseek-v3")) == DEEPSEEK_ALPHA  # group-limited routing
    assert routing_alpha(resolve_model("qwen3-235b-a22b")) == OTHER_MOE_ALPHA
    with pytest.raises(AutotuneError, match="no experts"):
        routing_alpha(resolve_model("llama3-8b"))


def test_skew_grows_with_the_ranks_and_the_tokens_and_is_none_without_ep():
    m = resolve_model("qwen3-235b-a22b")
    tokens = np.array([64.0, 512.0, 4096.0])
    assert np.all(busiest_rank_skew(m, 1, tokens) == 1.0)
    by_ep = [busiest_rank_skew(m, ep, tokens) for ep in (2, 4, 8, 16)]
    assert np.all(by_ep[0] > 1.0)
    assert all(np.all(a < b) for a, b in zip(by_ep, by_ep[1:]))
    assert np.all(np.diff(by_ep[2]) > 0)  # more tokens: the hot experts' share of them shows more
    assert np.all(by_ep[-1] <= 16.0)  # never more than every row on one rank
    with pytest.raises(AutotuneError, match="exceeds"):
        busiest_rank_skew(m, 256, tokens)


def test_experts_that_do_not_split_evenly_and_a_load_balancer():
    m = resolve_model("deepseek-v3")  # 256 experts over 72 ranks (SGLang's EP72 adds 32 redundant slots)
    tokens = np.array([256.0, 18432.0])
    free = busiest_rank_skew(m, 72, tokens)
    assert np.all(free > 2.0)
    assert np.all(busiest_rank_skew(m, 72, tokens, eplb=True) == EPLB_SKEW)
    assert busiest_rank_skew(m, 2, [4.0], eplb=True)[0] <= EPLB_SKEW  # a smaller draw stays as it is


@pytest.mark.parametrize("notes, on", [
    ("--enable-dp-attention --enable-deepep-moe --ep-num-redundant-experts 32", True),
    ("--ep-num-redundant-experts 0", False), ("vllm serve ... --enable-eplb", True),
    ("moe_config: backend: WIDEEP, load_balancer: ./moe_load_balancer.yaml", True),
    ("enable_attention_dp: true; moe_config: backend: CUTLASS", False), ("default expert distribution", False)])
def test_the_notes_name_a_load_balancer(notes, on):
    assert eplb_from_notes(notes) is on


def test_the_ep_step_waits_for_the_busiest_rank(monkeypatch):
    m = resolve_model("qwen3-235b-a22b")
    cluster = load_cluster("dgx-h200").for_gpus(8)
    shape = ss.ReplicaShape(tp=8, ep=8, attention_dp=True)

    def step(tokens):
        return ss._step_model.__wrapped__(m, cluster, shape, "fp8", 1.0, tokens, 8, "bf16").linear_s

    skewed = step(4096)
    monkeypatch.setattr(serving_experts, "busiest_rank_skew", lambda model, ep, tokens, eplb: np.ones_like(np.asarray(tokens, float)))
    balanced = step(4096)
    ratio = skewed[[256, 4096]] / balanced[[256, 4096]]
    # a decode-sized step reads its experts' weights whatever the rows; a large one computes the rows
    assert ratio[0] > 1.0 and ratio[1] > 1.2
    assert np.all(ratio < busiest_rank_skew(m, 8, [256.0, 4096.0]))  # the rest of the step is not skewed


def test_a_load_balancer_needs_experts_over_ranks():
    from autotune.cost.serving_eval import ServingDeployment
    from autotune.spec.runtime import load_runtime

    cluster, runtime = load_cluster("dgx-h200"), load_runtime("tensorrt-llm")
    with pytest.raises(AutotuneError, match="eplb"):
        ServingDeployment(model=resolve_model("llama3-8b"), cluster=cluster, runtime=runtime, tp=8, eplb=True)
    with pytest.raises(AutotuneError, match="eplb"):
        ServingDeployment(model=resolve_model("qwen3-235b-a22b"), cluster=cluster, runtime=runtime, tp=8, eplb=True)
    ServingDeployment(model=resolve_model("qwen3-235b-a22b"), cluster=cluster, runtime=runtime, tp=8, ep=8, eplb=True)
