"""Cache-aware layer grouping: which groups fit the L2, and what a group costs."""

import numpy as np
import pytest

from autotune.cost.cache import (PERSISTING_FRACTION, check_grouping, grouped_block_times, grouping_choices,
                                 layer_weight_bytes)
from autotune.cost.compute import block_times, op_coefficients
from autotune.cost.evaluate import evaluate_plan
from autotune.cost.inference import inference_tables
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload, TrainingWorkload

H100 = load_cluster("dgx-h100")
DEVICE = H100.device
NEUTRAL = Runtime(name="neutral")  # the old default workload's settings
SMALL = load_preset("small")  # hidden 768, FFN 3072: 7.08e6 parameters = 13.5 MiB per layer in bf16


def _decode_layer(model, batch=8):
    work = InferenceWorkload(kind="decode", batch=batch, prompt_len=256, output_len=1)
    return inference_tables(model, work, "decode").layer


def test_seed_model_has_no_group_that_fits_the_l2():
    # seed-dense-16: a layer is 6 * 16384^2 * 2 bytes = 3 GiB; at tp=8 384 MiB >> 37.5 MiB
    # (plus the two norms' weights, whole on every rank).
    table = _decode_layer(load_preset("seed-dense-16"))
    assert layer_weight_bytes(table, 8) == 6 * 16384 ** 2 * 2 / 8 + 2 * 16384 * 2
    assert grouping_choices(table, DEVICE, tp=8, sequence_parallel=False, num_layers=8, tokens_per_seq=1,
                            tokens_per_microbatch=64) == [(0, 0)]


def test_small_model_groups_up_to_what_the_persisting_l2_holds():
    table = _decode_layer(SMALL)
    capacity = PERSISTING_FRACTION * DEVICE.tier("sram").capacity_bytes  # 37.5 MiB
    assert layer_weight_bytes(table, 1) == (4 * 768 ** 2 + 2 * 768 * 3072 + 2 * 768) * 2
    choices = grouping_choices(table, DEVICE, tp=1, sequence_parallel=False, num_layers=6, tokens_per_seq=1,
                               tokens_per_microbatch=8)
    groups = {g for g, _ in choices if g}
    assert groups == {1, 2} and 2 * layer_weight_bytes(table, 1) <= capacity < 3 * layer_weight_bytes(table, 1)
    assert {t for g, t in choices if g == 1} == {1, 2, 4, 8}
    with pytest.raises(AutotuneError) as err:
        check_grouping(table, DEVICE, tp=1, sequence_parallel=False, group_layers=3, tile_tokens=8, tokens_per_seq=1)
    assert err.value.field == "cache_group_layers" and "at most 2" in err.value.message


def test_grouped_gemm_cost_by_hand():
    # Decode of `small`, micro-batch 8, one tile, a resident group (it covers the stage): the
    # FFN-up GEMM reads its input and writes its output in L2, and its weights from L2 too.
    table = _decode_layer(SMALL)
    base = block_times(table, DEVICE, "bf16", 8, 1, 1, False)
    grouped = grouped_block_times(base, table, DEVICE, "bf16", micro_batch=8, tp=1, cp=1, sequence_parallel=False,
                                  group_layers=2, tile_tokens=8, num_layers=2, tokens_per_seq=1,
                                  out_to_hbm=np.zeros(len(table)))
    i = table.names.index("ffn_up")
    coef = op_coefficients(table, DEVICE, "bf16")
    eff = DEVICE.kernel_efficiency
    h, f, e, b = 768, 3072, 2, 8
    compute = coef.lat_c[i] + 2 * b * h * f * coef.spf[i]
    memory = coef.lat_m[i] + (b * h * e + b * f * e + h * f * e) / (DEVICE.tier("sram").bandwidth_bytes_per_s * eff)
    assert float(grouped.fwd_ops_s[..., i]) == pytest.approx(max(compute, memory))
    # not resident (the stage has 4 layers, the group 2): its weights come from HBM once
    streamed = grouped_block_times(base, table, DEVICE, "bf16", micro_batch=8, tp=1, cp=1, sequence_parallel=False,
                                   group_layers=2, tile_tokens=8, num_layers=4, tokens_per_seq=1,
                                   out_to_hbm=np.zeros(len(table)))
    memory = coef.lat_m[i] + (b * h * e + b * f * e) / (DEVICE.tier("sram").bandwidth_bytes_per_s * eff) + h * f * e * coef.spb[i]
    assert float(streamed.fwd_ops_s[..., i]) == pytest.approx(max(compute, memory))


def _prefill(micro_batch, group=0, tile=0):
    plan = uniform_plan(num_layers=12, gpus=4, pp=4, micro_batch=micro_batch, global_batch=64,
                        cache_group_layers=group, cache_tile_tokens=tile)
    return evaluate_plan(SMALL, InferenceWorkload(kind="prefill", batch=64, prompt_len=512), H100, plan, runtime=NEUTRAL)


def test_one_tile_per_group_saves_hbm_traffic_in_prefill():
    # micro-batch 4 x 512 tokens = 2048 tokens, one tile: the norms, residuals and activations
    # of the group run from L2 at ~10 TB/s instead of HBM
    assert _prefill(4, 1, 2048).step_time_s < _prefill(4).step_time_s


def test_small_tiles_pay_kernel_launches():
    # every tile launches every kernel again: 8 tiles of 256 tokens cost more than 1 of 2048
    one, eight = _prefill(4, 1, 2048), _prefill(4, 1, 256)
    assert eight.step_time_s > one.step_time_s > 0


def test_training_grouping_changes_the_forward_only():
    work = TrainingWorkload(global_batch=64, seq_len=512)
    plans = [uniform_plan(num_layers=12, gpus=4, pp=4, micro_batch=2, global_batch=64, cache_group_layers=g,
                          cache_tile_tokens=t) for g, t in ((0, 0), (1, 1024))]
    plain, grouped = (evaluate_plan(SMALL, work, H100, p, runtime=NEUTRAL) for p in plans)
    assert grouped.breakdown["compute_s"] != plain.breakdown["compute_s"]
    assert grouped.peak_memory_bytes_per_gpu == plain.peak_memory_bytes_per_gpu
    from autotune.cost.contract import stage_cost
    from autotune.cost.stage import StageContext, StagePosition
    from autotune.graph.table import model_tables

    ctx = StageContext(tables=model_tables(SMALL, 512, 2), workload=work, runtime=NEUTRAL, cluster=H100, micro_batch=2,
                       num_microbatches=8)
    pos = StagePosition(inflight=1.0, neighbors=2, p2p_inter_node=False)
    costs = [stage_cost(ctx, p.stages[1], pos) for p in plans]
    assert costs[0].bwd_s == costs[1].bwd_s and costs[0].fwd_s != costs[1].fwd_s
