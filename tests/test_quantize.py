"""Low-precision casts per recipe as Transformer Engine runs them (autotune/cost/quantize.py), and the
NeMo/Megatron-Bridge recipe settings the published rows take (NVFP4 without TP overlap, the
embedding and loss in a layer's slot)."""

import csv
from dataclasses import replace

import numpy as np
import pytest

from autotune.cost.compute import block_times, op_amounts, op_coefficients
from autotune.cost.quantize import cast_s, producer_cast_bytes_per_element, quantize_bytes_per_element
from autotune.errors import AutotuneError
from autotune.graph import model_tables
from autotune.plan.builders import uniform_plan
from autotune.spec.hardware_data import load_device
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload

LLAMA_8B = load_preset("llama3-8b")


def test_standalone_cast_bytes_follow_each_recipes_passes_and_copies():
    q = quantize_bytes_per_element
    # per-tensor FP8: read 2, write 1 per copy; Hopper writes a transpose too, current scaling reads once more
    assert q("fp8", fp8_gemm_any_layout=True) == 3.0
    assert q("fp8") == 4.0
    assert q("fp8", fp8_gemm_any_layout=True, amax_kernel=True) == 5.0
    assert q("fp8", amax_kernel=True) == 6.0
    # block-scaled: two copies with their scales, whatever the layout support; NVFP4 adds its amax pass
    assert q("mxfp8") == q("mxfp8", fp8_gemm_any_layout=True) == pytest.approx(2 + 2 * (1 + 1 / 32))
    assert q("nvfp4", fp8_gemm_any_layout=True) == pytest.approx(2 + 2 + 2 * (0.5 + 1 / 16))
    assert q("fp8_rowwise") == 8.0


def test_norm_and_activation_kernels_quantize_their_own_output_where_te_fuses_them():
    p = producer_cast_bytes_per_element
    # delayed scaling: the norm writes FP8 itself; Hopper still transposes it (read 1, write 1)
    assert p("fp8", "te_delayed", "norm", fp8_gemm_any_layout=True) == 0.0
    assert p("fp8", "te_delayed", "activation") == 2.0
    # current scaling: the amax comes out of the norm/activation, the cast itself remains
    assert p("fp8", "te_current", "norm", fp8_gemm_any_layout=True) == 3.0
    assert p("fp8", "te_current", "other", fp8_gemm_any_layout=True) == 5.0
    # MXFP8: activations fused, norms only through cuDNN (not TE's default)
    assert p("mxfp8", "cast", "activation") == 0.0
    assert p("mxfp8", "cast", "norm") == quantize_bytes_per_element("mxfp8")
    # NVFP4 with the Hadamard transform's own amax, and standalone casts (torchao), fuse nothing
    for producer in ("norm", "activation", "other"):
        assert p("nvfp4", "cast", producer) == quantize_bytes_per_element("nvfp4")
        assert p("fp8", "cast", producer) == quantize_bytes_per_element("fp8")


def _layer_casts(device: str, dtype: str, recipe: str):
    table = model_tables(LLAMA_8B, 8192, 2, "flash").layer
    dev = load_device(device)
    coef = op_coefficients(table, dev, dtype)
    fwd, bwd, weights = cast_s(table, coef, dtype, op_amounts(table, 1, 1, 1, False), fp8_recipe=recipe,
                               fp8_gemm_any_layout=dev.fp8_gemm_any_layout)
    return table, fwd, bwd, weights


def test_layer_casts_order_the_recipes_as_their_kernels_do():
    totals = {}
    for recipe in ("te_delayed", "cast", "te_current"):
        _, fwd, bwd, _ = _layer_casts("b200", "fp8", recipe)
        totals[recipe] = float(np.sum(fwd) + np.sum(bwd))
    assert totals["te_delayed"] < totals["cast"] < totals["te_current"]
    # NVFP4 moves fewer bytes per copy than MXFP8 but reads every tensor twice: its casts cost more
    nvfp4 = _layer_casts("b200", "nvfp4", "cast")
    mxfp8 = _layer_casts("b200", "mxfp8", "cast")
    assert np.sum(nvfp4[1]) + np.sum(nvfp4[2]) > np.sum(mxfp8[1]) + np.sum(mxfp8[2])
    # the weights' casts are standalone under every recipe, so delayed and plain casts price them alike
    assert np.allclose(_layer_casts("b200", "fp8", "te_delayed")[3], _layer_casts("b200", "fp8", "cast")[3])


def test_delayed_scaling_casts_nothing_after_a_norm_on_blackwell_but_transposes_on_hopper():
    table, fwd, _, weights = _layer_casts("b200", "fp8", "te_delayed")
    qkv = list(table.names).index("qkv_proj")
    assert fwd[..., qkv] == pytest.approx(weights[..., qkv])  # the input's cast is the norm's own write
    table, fwd, _, weights = _layer_casts("h100", "fp8", "te_delayed")
    assert fwd[..., qkv] > weights[..., qkv]


def test_blackwell_fp8_layouts_make_its_casts_cheaper_than_hoppers_at_the_same_bandwidth():
    b200 = load_device("b200")
    assert b200.fp8_gemm_any_layout and load_device("gb200").fp8_gemm_any_layout
    assert not load_device("h100").fp8_gemm_any_layout
    table = model_tables(LLAMA_8B, 4096, 2, "flash").layer
    hopper_like = replace(b200, fp8_gemm_any_layout=False)
    fast = block_times(table, b200, "fp8", 1, 1, 1, False, fp8_recipe="cast")
    slow = block_times(table, hopper_like, "fp8", 1, 1, 1, False, fp8_recipe="cast")
    assert fast.fwd_s < slow.fwd_s and fast.bwd_s < slow.bwd_s
    # the block-scaled formats write two copies on either
    assert block_times(table, b200, "mxfp8", 1, 1, 1, False).fwd_s == pytest.approx(
        block_times(table, hopper_like, "mxfp8", 1, 1, 1, False).fwd_s)


def test_fp8_recipe_is_checked():
    with pytest.raises(AutotuneError, match="runtime.fp8_recipe") as err:
        Runtime(name="neutral", fp8_recipe="delayed")
    assert err.value.field == "runtime.fp8_recipe"


def _rows(data_dir):
    with open(data_dir / "modern_runs.csv", newline="") as handle:
        return {row["id"]: row for row in csv.DictReader(handle)}


def test_published_rows_take_their_runtimes_fp8_recipe(data_dir):
    from autotune.calibrate.modern import modern_run_from_row

    rows = _rows(data_dir)
    recipes = {run_id: modern_run_from_row(dict(rows[run_id], iter_s="1"))[2].fp8_recipe  # some give TFLOP/s only
               for run_id in ("nemo-mb-005", "nemo-longseq-01", "nemo-2407-01", "tt-03", "llmf-072")}
    assert recipes == {"nemo-mb-005": "te_current", "nemo-longseq-01": "te_delayed", "nemo-2407-01": "te_delayed",
                       "tt-03": "cast", "llmf-072": "cast"}


def test_nemo_nvfp4_recipes_do_not_overlap_tp_communication(data_dir):
    from autotune.calibrate.modern import modern_run_from_row

    rows = _rows(data_dir)
    assert not modern_run_from_row(rows["nemo-mb-016"])[4].overlap_tp_comm  # NVFP4, TP 4
    assert modern_run_from_row(rows["nemo-mb-005"])[4].overlap_tp_comm  # FP8, same layout
    fp8_row = dict(rows["nemo-mb-005"], precision="nvfp4")
    assert not modern_run_from_row(fp8_row)[4].overlap_tp_comm


def test_405b_gives_the_embedding_and_loss_a_layers_slot(data_dir):
    from autotune.calibrate.modern import modern_run_from_row

    model, _, _, _, plan, _ = modern_run_from_row(_rows(data_dir)["nemo-mb-005"])  # 126 layers, pp 16 x vpp 4
    counts = [s.num_layers for s in plan.stages]
    assert model.num_layers == 126 and sum(counts) == 126
    assert counts[0] == counts[-1] == 7 and set(counts[1:-1]) == {8}
    plan.check_against(126, plan.global_batch)
    # 80 layers split evenly into pp 4 x vpp 5: no slots taken
    model, _, _, _, plan, _ = modern_run_from_row(_rows(data_dir)["nemo-mb-011"])
    assert {s.num_layers for s in plan.stages} == {model.num_layers // len(plan.stages)}


def test_interleaved_stages_may_count_the_embedding_and_head_as_layers_but_nothing_else():
    plan = uniform_plan(num_layers=16, gpus=4, pp=4, vpp=2, global_batch=8)
    stages = list(plan.stages)
    stages[0] = replace(stages[0], layers=(0, 3))  # 3 layers + the embedding: 2 chunks of 2 slots
    stages[1] = replace(stages[1], layers=(3, 8))
    with pytest.raises(AutotuneError, match="vpp"):  # a middle stage of 5 layers has no slot to give
        plan.with_changes(stages=tuple(stages)).check_against(16, 8)
    stages[1] = replace(stages[1], layers=(3, 7))
    stages[2] = replace(stages[2], layers=(7, 11))
    stages[3] = replace(stages[3], layers=(11, 15))  # 3 + 4 + 4 + 4: the head's stage has 4 layers
    plan.with_changes(stages=tuple(stages)).check_against(15, 8)


def test_scales_taken_from_the_data_are_all_reduced_over_tp_before_a_sequence_parallel_gather():
    from autotune.cost.quantize import amax_all_reduces_per_layer
    from autotune.cost.evaluate import evaluate_plan
    from autotune.spec.resolve import resolve_cluster

    assert amax_all_reduces_per_layer("fp8", "te_current", 4, True) == 4
    assert amax_all_reduces_per_layer("nvfp4", "cast", 4, True) == 4
    assert amax_all_reduces_per_layer("fp8", "te_delayed", 4, True) == 0
    assert amax_all_reduces_per_layer("mxfp8", "cast", 4, True) == 0  # block scales need no reduction
    assert amax_all_reduces_per_layer("fp8", "te_current", 4, False) == 0
    assert amax_all_reduces_per_layer("nvfp4", "cast", 1, True) == 0
    cluster = resolve_cluster("dgx-b200", None)
    plan = uniform_plan(num_layers=32, gpus=8, tp=4, dp=2, global_batch=16, sequence_parallel=True)
    tp_s = {recipe: evaluate_plan(LLAMA_8B, TrainingWorkload(global_batch=16, seq_len=4096, dtype="fp8"), cluster, plan,
                                  runtime=Runtime(name="neutral", fp8_recipe=recipe)).breakdown["tp_cp_comm_s"]
            for recipe in ("te_delayed", "te_current")}
    assert tp_s["te_current"] > tp_s["te_delayed"]


def test_evaluate_takes_the_fp8_recipe(capsys):
    import json

    from autotune.cli.main import main

    def step_s(*flags):
        assert main(["evaluate", "--model", "llama3-8b", "--cluster", "dgx-b200", "--gpus", "8", "--tp", "2",
                     "--dtype", "fp8", "--global-batch", "16", "--seq-len", "4096", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["step_time_s"]
    delayed, cast, current = (step_s("--fp8-recipe", recipe) for recipe in ("te_delayed", "cast", "te_current"))
    assert delayed < cast < current
    assert step_s() == delayed  # megatron, the default runtime, runs TE's delayed scaling
    assert main(["evaluate", "--model", "small", "--gpus", "8", "--fp8-recipe", "hybrid"]) == 2


def test_te_rows_gather_sequence_parallel_inputs_in_their_low_precision_format(data_dir):
    from autotune.calibrate.modern import modern_run_from_row

    rows = _rows(data_dir)

    def gathers(run_id, **changes):
        """Whether the row's runtime gathers its sequence-parallel inputs in the low-precision format:
        its TP communication is cheaper than with the same runtime gathering them in BF16."""
        from autotune.cost.evaluate import evaluate_plan
        from autotune.spec.hardware_data import load_cluster

        model, workload, runtime, cluster, plan, _ = modern_run_from_row(dict(rows[run_id], iter_s="1", **changes))
        tp_s = [evaluate_plan(model, workload, load_cluster(cluster), plan, runtime=runtime.with_changes(fp8_tp_all_gather=on))
                .breakdown["tp_cp_comm_s"] for on in (True, False)]
        return runtime.fp8_tp_all_gather and tp_s[0] < tp_s[1]
    assert gathers("nemo-mb-005") and gathers("nemo-mb-016") and gathers("nemo-mb-011")  # fp8, nvfp4, mxfp8 at TP > 1
    assert not gathers("nemo-mb-045")  # TP 1: nothing to gather
    assert not gathers("nemo-mb-005", precision="bf16")
