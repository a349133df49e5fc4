"""Scaling a plan to this machine keeps its shape; report arithmetic; the memory accounting."""

import math

import pytest

from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.spec.presets import load_preset
from autotune.spec.workload import TrainingWorkload
from autotune.validate.report import plan_label, spearman
from autotune.validate.scale import ScaleTarget, parse_scale, scale_case, scaled_degrees


def _case(name, gpus, global_batch, **degrees):
    model = load_preset(name)
    plan = uniform_plan(num_layers=model.num_layers, gpus=gpus, global_batch=global_batch,
                        has_embeddings=model.has_embeddings, **degrees)
    return model, TrainingWorkload(global_batch=global_batch, seq_len=min(2048, model.max_seq_len)), plan


@pytest.mark.parametrize("degrees,world,expected", [
    ({"dp": 2, "tp": 4, "pp": 2}, 4, {"dp": 1, "tp": 2, "pp": 2}),
    ({"dp": 8, "tp": 1, "pp": 1}, 4, {"dp": 4, "tp": 1, "pp": 1}),
    ({"dp": 2, "tp": 2, "pp": 1}, 4, {"dp": 2, "tp": 2, "pp": 1}),
    ({"dp": 1, "tp": 8, "pp": 16}, 2, {"dp": 1, "tp": 1, "pp": 2}),
    ({"dp": 3, "tp": 1, "pp": 1}, 2, {"dp": 2, "tp": 1, "pp": 1}),
])
def test_scaled_degrees_fit_and_keep_dimensions_while_they_can(degrees, world, expected):
    out = scaled_degrees(degrees, world)
    assert out == expected
    assert math.prod(out.values()) <= world


def test_scaled_llama_keeps_gqa_swiglu_schedule_and_divisibility():
    model, workload, plan = _case("llama3-70b", 64, 1024, tp=8, pp=4, vpp=2, micro_batch=1, sequence_parallel=True,
                                  recompute="selective")
    case = scale_case(model, workload, plan, ScaleTarget(world=4), dtypes=("fp32", "bf16"))
    m, p = case.model, case.plan
    assert (p.pp, p.stages[0].tp, p.dp, p.vpp, p.schedule) == (2, 2, 1, 2, "interleaved")
    assert p.gpus == 4 and p.stages[0].sequence_parallel and p.stages[0].recompute == "selective"
    assert m.ffn_activation == "swiglu" and m.norm == "rmsnorm" and m.num_heads > m.num_kv_heads
    assert m.num_heads % 2 == 0 and m.num_kv_heads % 2 == 0 and m.ffn_hidden_size % 2 == 0 and m.vocab_size % 2 == 0
    assert all(s.num_layers % p.vpp == 0 for s in p.stages) and m.num_layers == p.num_layers
    assert p.num_microbatches % p.pp == 0 and case.workload.global_batch == p.global_batch
    assert case.workload.dtype == "bf16"  # the profile has bf16 fits, so it is kept
    p.check_against(m.num_layers, case.workload.global_batch)


def test_scaling_drops_unsupported_features_with_notes():
    model, workload, plan = _case("gpt3-1.3b", 32, 512, tp=2, cp=2, pp=2, micro_batch=1)
    case = scale_case(model, workload, plan, ScaleTarget(world=4))
    assert all(s.cp == 1 for s in case.plan.stages)
    assert case.workload.dtype == "fp32" and case.model.tied_embeddings and case.model.position_embedding == "learned"
    text = " ".join(case.notes)
    assert "context parallelism" in text and "bf16 -> fp32" in text


def test_uneven_stages_keep_their_share():
    model, workload, _ = _case("large", 4, 128, pp=2, micro_batch=4)
    plan = uniform_plan(num_layers=36, gpus=4, pp=2, micro_batch=4, global_batch=128)
    stages = (plan.stages[0].__class__(**{**plan.stages[0].__dict__, "layers": (0, 12)}),
              plan.stages[1].__class__(**{**plan.stages[1].__dict__, "layers": (12, 36)}))
    case = scale_case(model, workload, plan.with_changes(stages=stages), ScaleTarget(world=4, layers=6))
    assert [s.num_layers for s in case.plan.stages] == [2, 4]


def test_parse_scale():
    assert parse_scale("auto", world=2) == ScaleTarget(world=2)
    assert parse_scale("hidden=128,layers=2", world=4).hidden == 128
    for bad in ("depth=2", "hidden=x", "hidden=0"):
        with pytest.raises(AutotuneError, match="scale"):
            parse_scale(bad, world=2)


def test_spearman_and_labels():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert spearman([1], [1]) is None
    plan = uniform_plan(num_layers=4, gpus=4, pp=2, dp=2, micro_batch=1, global_batch=8, zero=3)
    assert plan_label(plan) == "dp2-pp2-1f1b-zero3-mb1x4"
    assert plan_label(uniform_plan(num_layers=4, gpus=1, micro_batch=8, global_batch=8)) == "single-mb8x1"
