"""MoE inference: decode reads only the experts its batch reaches; prefill and decode are searched."""

import pytest

import autotune
from autotune.cost.moe import experts_hit_share
from autotune.spec.workload import InferenceWorkload
from moe_models import MIXTRAL_8X7B


def test_experts_hit_share_formula():
    m = MIXTRAL_8X7B  # 8 experts, top-2
    assert experts_hit_share(1, m) == pytest.approx(2 / 8)
    assert experts_hit_share(2, m) == pytest.approx(1 - (6 / 8) ** 2)
    assert experts_hit_share(1000, m) == pytest.approx(1.0)
    many = m.with_changes(num_experts=256, num_experts_per_token=8)
    # 16 tokens x 8 draws out of 256: about 40% of the experts
    assert experts_hit_share(16, many) == pytest.approx(1 - (1 - 8 / 256) ** 16)


def _decode(batch, **degrees):
    w = InferenceWorkload(batch=batch, prompt_len=512, output_len=16, kind="decode")
    return autotune.evaluate(MIXTRAL_8X7B, 8, workload=w, micro_batch=batch, sequence_parallel=False, **degrees)


def test_decode_time_grows_with_the_experts_a_batch_reaches():
    one, four, many = (_decode(b, tp=8, etp=8).breakdown["compute_s"] for b in (1, 4, 64))
    assert one < four < many
    # past a few tokens all 8 experts are read: 64 sequences cost little more than 16
    sixteen = _decode(16, tp=8, etp=8).breakdown["compute_s"]
    assert many < 1.3 * sixteen


def test_decode_and_prefill_of_moe_are_searched():
    for kind in ("decode", "prefill"):
        w = InferenceWorkload(batch=32, prompt_len=512, output_len=0 if kind == "prefill" else 16, kind=kind)
        result = autotune.search(MIXTRAL_8X7B, 8, workload=w, cache=False)
        assert result.estimate.fits
        assert all(MIXTRAL_8X7B.num_experts % s.ep == 0 for s in result.plan.stages)
