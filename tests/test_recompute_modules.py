"""Selective recomputation of Megatron-Core's named modules (cost/recompute_modules.py): a
recomputed module's forward is paid again in backward and its saved activations are dropped."""

import csv
from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.contract import stage_cost
from autotune.cost.moe import expert_layer_cost, moe_layer_split
from autotune.cost.stage import StageContext, StagePosition, _block
from autotune.errors import AutotuneError
from autotune.graph import model_tables
from autotune.plan.plan import Plan, StagePlan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload
from moe_models import MIXTRAL_8X7B

CLUSTER = load_cluster("dgx-h100")
POS = StagePosition(inflight=2.0, neighbors=2, p2p_inter_node=False)


def _ctx(model, gpus=8):
    w = TrainingWorkload(global_batch=64, seq_len=4096)
    return StageContext(tables=model_tables(model, 4096, 2), workload=w, runtime=Runtime(name="neutral"),
                        cluster=CLUSTER.for_gpus(gpus),
                        micro_batch=1, num_microbatches=8)


def _stage(tp=2, ep=1, **kw):
    return StagePlan(layers=(0, 8), has_embedding=False, has_head=False, num_gpus=8, tp=tp, cp=1, dp=8 // tp,
                     sequence_parallel=tp > 1, ep=ep, **kw)


def test_recomputing_the_mlp_pays_its_forward_again_and_drops_its_activations():
    ctx = _ctx(load_preset("llama3-8b"))
    plain, mlp = stage_cost(ctx, _stage(), POS), stage_cost(ctx, _stage(recompute_modules=("mlp",)), POS)
    block, names = _block(ctx, ctx.tables.layer, _stage()), ctx.tables.layer.names
    ffn = [names.index(n) for n in ("ffn_up", "ffn_act", "ffn_down")]
    ffn_fwd_s = 8 * float(np.asarray(block.fwd_ops_s)[..., ffn].sum())
    assert mlp.bwd_s - plain.bwd_s == pytest.approx(ffn_fwd_s, rel=1e-9)
    assert mlp.fwd_s == plain.fwd_s
    assert mlp.memory.activations_bytes < 0.8 * plain.memory.activations_bytes  # the FFN keeps most of a layer
    # the norms are cheap: a layernorm recompute costs less time than the MLP's and drops less memory
    norms = stage_cost(ctx, _stage(recompute_modules=("layernorm",)), POS)
    assert 0 < norms.bwd_s - plain.bwd_s < 0.2 * ffn_fwd_s
    assert mlp.memory.activations_bytes < norms.memory.activations_bytes < plain.memory.activations_bytes


def test_recomputing_the_expert_activation_pays_it_once_per_moe_layer():
    ctx = _ctx(MIXTRAL_8X7B)
    stage = _stage(tp=1, ep=8)
    plain, act = stage_cost(ctx, stage, POS), stage_cost(ctx, replace(stage, recompute_modules=("moe_act",)), POS)
    ex = expert_layer_cost(ctx, stage)
    _, n_moe = moe_layer_split(ctx.tables, stage)
    assert 0 < ex.act_fwd_s < 0.2 * ex.fwd_s
    assert act.bwd_s - plain.bwd_s == pytest.approx(n_moe * ex.act_fwd_s, rel=1e-9)
    dropped = plain.memory.activations_bytes - act.memory.activations_bytes
    assert dropped == pytest.approx(POS.inflight * n_moe * ex.act_out_bytes, rel=1e-9)
    # 'mlp' names the dense MLP only: an all-MoE model recomputes nothing for it (Megatron-Core's transformer_layer.py)
    assert stage_cost(ctx, replace(stage, recompute_modules=("mlp",)), POS).bwd_s == plain.bwd_s
    # 'moe' recomputes the whole routed part, more than its activation alone
    whole = stage_cost(ctx, replace(stage, recompute_modules=("moe",)), POS)
    assert whole.bwd_s - plain.bwd_s > n_moe * ex.fwd_s
    assert whole.memory.activations_bytes < act.memory.activations_bytes


@pytest.mark.parametrize("changes", [dict(recompute_modules=("attention",)), dict(recompute_modules=("mlp", "mlp")),
                                     dict(recompute="full", recompute_modules=("mlp",)), dict(recompute_modules="mlp")])
def test_bad_recompute_modules_are_refused(changes):
    with pytest.raises(AutotuneError) as err:
        _stage(**changes)
    assert err.value.field == "stage.recompute_modules"


def test_inference_refuses_recompute_modules():
    from autotune.cost.inference import check_inference_stage

    with pytest.raises(AutotuneError) as err:
        check_inference_stage(_stage(recompute_modules=("mlp",)), "prefill")
    assert err.value.field == "recompute_modules"


def test_recompute_modules_round_trip_through_json():
    stage = _stage(recompute="selective", recompute_modules=["mla_up_proj", "mlp"])
    plan = Plan(gpus=8, micro_batch=1, num_microbatches=8, stages=(replace(stage, layers=(0, 32)),))
    assert Plan.from_json(plan.to_json()).stages[0].recompute_modules == ("mla_up_proj", "mlp")


def test_nemo_moe_rows_recompute_their_recipes_modules(data_dir):
    from autotune.calibrate.modern import modern_run_from_row

    rows = {r["id"]: r for r in csv.DictReader(open(data_dir / "modern_runs.csv"))}
    modules = {i: modern_run_from_row(rows[i])[4].stages[0].recompute_modules
               for i in ("nemo-mb-082", "nemo-mb-040", "nemo-mb-022", "nemo-mb-002", "nemo-mb-042")}
    assert modules == {"nemo-mb-082": ("mla_up_proj", "mlp"), "nemo-mb-040": ("mla_up_proj",),
                       "nemo-mb-022": ("layernorm", "moe_act"), "nemo-mb-002": (), "nemo-mb-042": ()}


@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_core_attn_is_the_selective_set_counted_once(attention):
    ctx = replace(_ctx(load_preset("llama3-8b")), tables=model_tables(load_preset("llama3-8b"), 4096, 2, attention))
    selective = stage_cost(ctx, _stage(recompute="selective"), POS)
    core = stage_cost(ctx, _stage(recompute_modules=("core_attn",)), POS)
    both = stage_cost(ctx, _stage(recompute="selective", recompute_modules=("core_attn",)), POS)
    for cost in (core, both):
        assert cost.bwd_s == pytest.approx(selective.bwd_s, rel=1e-12)
        assert cost.memory.activations_bytes == pytest.approx(selective.memory.activations_bytes, rel=1e-12)
    if attention == "unfused":  # the scores are dropped
        assert selective.memory.activations_bytes < stage_cost(ctx, _stage(), POS).memory.activations_bytes
