"""Inference workloads: prefill, decode and serve estimates against hand-computed cases."""

import json
import subprocess
import sys

import pytest

import autotune as api
from autotune.spec.resolve import inference_workload
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.plan.io import WORKLOAD_KINDS, workload_from_dict
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload

H100 = load_cluster("dgx-h100")
NEUTRAL = Runtime(name="neutral")  # the old default workload's settings


def _plan(model, gpus, batch, **kw):
    return uniform_plan(num_layers=model.num_layers, gpus=gpus, global_batch=batch,
                        has_embeddings=model.has_embeddings, **kw)


def test_kv_cache_bytes_are_gqa_aware():
    # llama3-8b: 32 layers, 8 KV heads of 128 -> K and V of 1024 values each, bf16:
    # 2 * 1024 * 2 = 4096 bytes per token per layer; 4 sequences x (1000 + 24) positions.
    model = load_preset("llama3-8b")
    work = InferenceWorkload(kind="decode", batch=4, prompt_len=1000, output_len=24)
    est = evaluate_plan(model, work, H100, _plan(model, 1, 4, micro_batch=4), runtime=NEUTRAL)
    assert est.inference.kv_cache_bytes == 4 * 1024 * 32 * 4096
    mha = model.with_changes(num_kv_heads=32)
    est_mha = evaluate_plan(mha, work, H100, _plan(mha, 1, 4, micro_batch=4), runtime=NEUTRAL)
    assert est_mha.inference.kv_cache_bytes == 4 * est.inference.kv_cache_bytes
    # tp=2 halves what each GPU holds (the KV heads are split)
    est_tp = evaluate_plan(model, work, H100, _plan(model, 2, 4, tp=2, micro_batch=4), runtime=NEUTRAL)
    assert est_tp.inference.kv_cache_bytes_per_gpu == est.inference.kv_cache_bytes / 2


def test_decode_step_is_memory_bound_on_weights_and_kv_cache():
    # seed-dense-16 on 8 GPUs (tp=8): per step each GPU reads its weight shard and its share of
    # the KV cache. Hand count: 6 h^2 parameters per layer (QKV+out 4 h^2, FFN 2 h f with f = h),
    # 16 layers, 2 bytes; KV: 2 h * 2 bytes per token per layer over the mean context.
    model = load_preset("seed-dense-16")
    h, layers, batch, prompt = 16384, 16, 8, 4000
    work = InferenceWorkload(kind="decode", batch=batch, prompt_len=prompt, output_len=1)
    est = evaluate_plan(model, work, H100, _plan(model, 8, batch, tp=8, micro_batch=batch), runtime=NEUTRAL)
    weights = layers * 6 * h * h * 2 / 8
    kv = batch * (prompt + 1) * layers * 2 * h * 2 / 8  # mean context of one step: prompt + 1
    device = H100.device
    seconds_per_byte = device.memory.seconds_per_unit / device.kernel_efficiency
    lower = (weights + kv) * seconds_per_byte
    assert lower < est.breakdown["compute_s"] < lower * 1.2  # the rest: kernel launches, activations
    assert est.inference.tpot_s == pytest.approx(est.breakdown["compute_s"] + est.breakdown["tp_cp_comm_s"])
    assert est.inference.tps == pytest.approx(batch / est.inference.tpot_s)


def test_prefill_is_compute_bound():
    # Hand count for one GPU: GEMMs 2 * 6 h^2 FLOPs per token per layer at the GEMM rate;
    # causal flash attention 2 s^2 h FLOPs per sequence per layer at the attention rate.
    model = load_preset("seed-dense-16")
    h, layers, s, batch = 16384, 16, 2048, 2
    work = InferenceWorkload(kind="prefill", batch=batch, prompt_len=s)
    est = evaluate_plan(model, work, H100, _plan(model, 8, batch, tp=8, micro_batch=1, sequence_parallel=True),
                        runtime=NEUTRAL)
    eff = H100.device.kernel_efficiency
    gemm = batch * layers * 12 * h * h * s * H100.device.regression("gemm", "bf16").seconds_per_unit / eff / 8
    attn = batch * layers * 2 * s * s * h * H100.device.regression("attention", "bf16").seconds_per_unit / eff / 8
    compute = est.breakdown["compute_s"]
    assert gemm + attn < compute < 1.15 * (gemm + attn)
    assert est.inference.ttft_s == est.step_time_s
    assert est.inference.tps == pytest.approx(batch * s / est.step_time_s)
    assert est.inference.tpot_s is None


def test_pipeline_formulas_prefill_and_decode():
    model = load_preset("seed-dense-16")
    plan = _plan(model, 16, 32, tp=1, pp=16, micro_batch=4)
    b = plan.num_microbatches
    pre = evaluate_plan(model, InferenceWorkload(kind="prefill", batch=32, prompt_len=1024), H100, plan, runtime=NEUTRAL)
    times = [s.microbatch_time_s for s in pre.stages]
    assert pre.step_time_s == pytest.approx(sum(times) + (b - 1) * max(times))
    dec = evaluate_plan(model, InferenceWorkload(kind="decode", batch=32, prompt_len=1024, output_len=3), H100, plan,
                        runtime=NEUTRAL)
    times = [s.microbatch_time_s for s in dec.stages]
    assert dec.inference.tpot_s == pytest.approx(max(sum(times), b * max(times)))
    assert dec.step_time_s == pytest.approx(3 * dec.inference.tpot_s)
    assert sum(dec.breakdown.values()) == pytest.approx(dec.step_time_s)


def test_serve_is_prefill_then_decode():
    model = load_preset("llama3-8b")
    work = InferenceWorkload(kind="serve", batch=16, prompt_len=512, output_len=64)
    est = evaluate_plan(model, work, H100, _plan(model, 2, 16, tp=2, micro_batch=16), runtime=NEUTRAL)
    assert est.step_time_s == pytest.approx(est.inference.ttft_s + 63 * est.inference.tpot_s)
    assert est.inference.tps == pytest.approx(16 * 64 / est.step_time_s)
    assert est.inference.time_per_token_s == pytest.approx(1 / est.inference.tps)
    assert sum(est.breakdown.values()) == pytest.approx(est.step_time_s)


def test_longer_context_costs_more_decode_time():
    model = load_preset("llama3-8b")
    plan = _plan(model, 1, 8, micro_batch=8)
    short, long = (evaluate_plan(model, InferenceWorkload(kind="decode", batch=8, prompt_len=p, output_len=8), H100, plan,
                                 runtime=NEUTRAL)
                   for p in (512, 4096))
    assert long.inference.tpot_s > short.inference.tpot_s
    assert long.peak_memory_bytes_per_gpu > short.peak_memory_bytes_per_gpu


def test_inference_workloads_round_trip_through_plan_files():
    work = InferenceWorkload(kind="serve", batch=8, prompt_len=100, output_len=10, target_tpot_s=0.05)
    assert {"prefill", "decode", "serve"} <= set(WORKLOAD_KINDS)
    from dataclasses import asdict
    assert workload_from_dict(asdict(work)) == work


@pytest.mark.parametrize("kwargs, field", [
    (dict(kind="decode", batch=1, prompt_len=100, output_len=0), "output_len"),
    (dict(kind="serve", batch=0, prompt_len=100, output_len=4), "batch"),
    (dict(kind="generate", batch=1, prompt_len=100), "workload"),
    (dict(kind="serve", batch=1, prompt_len=100, output_len=4, target_tpot_s=-1.0), "target_tpot_s"),
])
def test_bad_workloads_name_the_field(kwargs, field):
    with pytest.raises(AutotuneError) as err:
        InferenceWorkload(**kwargs)
    assert err.value.field == field


@pytest.mark.parametrize("plan_kw, kind, field", [
    (dict(tp=1, cp=2), "decode", "cp"),
    (dict(tp=2, sequence_parallel=True), "decode", "sequence_parallel"),
    (dict(tp=1, zero=1), "prefill", "zero"),
    (dict(tp=1, recompute="full"), "prefill", "recompute"),
    (dict(tp=1, activations_in="host"), "prefill", "activations_in"),
])
def test_inference_rejects_training_only_choices(plan_kw, kind, field):
    model = load_preset("llama3-8b")
    gpus = 2 if plan_kw.get("tp") == 2 or plan_kw.get("cp") == 2 else 1
    work = InferenceWorkload(kind=kind, batch=2, prompt_len=128, output_len=0 if kind == "prefill" else 4)
    with pytest.raises(AutotuneError) as err:
        evaluate_plan(model, work, H100, _plan(model, gpus, 2, micro_batch=2, **plan_kw), runtime=NEUTRAL)
    assert err.value.field == field


def test_prompt_longer_than_the_model_allows():
    with pytest.raises(AutotuneError) as err:
        api.evaluate("seed-dense-16", 16, tp=8, pp=2,
                     workload=InferenceWorkload(kind="decode", batch=128, prompt_len=10_000, output_len=1))
    assert err.value.field == "prompt_len" and "10000" in err.value.message


def test_unreachable_serving_target_says_what_the_best_plan_reaches():
    model = load_preset("llama3-8b")
    work = inference_workload(model, "serve", batch=8, prompt_len=256, output_len=16, target_tpot_s=1e-6)
    with pytest.raises(AutotuneError) as err:
        api.evaluate(model, 2, workload=work, tp=2, micro_batch=8)
    assert err.value.field == "target_tpot_s"
    assert "best uniform plan on 2 GPUs" in err.value.message and "misses them too" in err.value.message


def test_reachable_target_passes():
    model = load_preset("llama3-8b")
    work = inference_workload(model, "serve", batch=8, prompt_len=256, output_len=16, target_tpot_s=1.0)
    est = api.evaluate(model, 2, workload=work, tp=2, micro_batch=8)
    assert est.inference.meets_targets is True


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_cli_evaluate_decode_json():
    code, out, err = run_cli("evaluate", "--model", "llama3-8b", "--gpus", "2", "--tp", "2", "--workload", "decode",
                             "--batch", "8", "--prompt-len", "1024", "--output-len", "32", "--micro-batch", "8", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert {"tps", "tpot_s", "kv_cache_bytes", "time_per_token_s"} <= set(data)


@pytest.mark.parametrize("args, needle", [
    (["--workload", "decode", "--prompt-len", "10000", "--output-len", "1"], "prompt_len"),
    (["--workload", "serve", "--output-len", "8", "--target-tpot-ms", "0.0001", "--prompt-len", "512", "--batch", "8"],
     "target_tpot_s"),
    (["--workload", "chat"], "--workload"),
])
def test_cli_inference_bad_input_is_one_line_exit_2(args, needle):
    code, out, err = run_cli("evaluate", "--model", "seed-dense-16", "--gpus", "16", "--tp", "8", "--pp", "2", *args)
    assert code == 2, err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_seed_experiment_rows_respect_the_roofline_bounds():
    from autotune.scenarios.seed_experiment import SEED_CLAIMS, format_markdown, seed_comparison

    for tps, tpot in SEED_CLAIMS.values():  # the seed's TPOT is 1 / TPS (within its rounding)
        assert tpot == pytest.approx(1 / tps, rel=0.01)
    result = seed_comparison(include_best_uniform=False)
    names = {(r.name, r.workload) for r in result.rows}
    assert names == {(n, w) for n in ("tp8-pp2", "layerwise-pp16") for w in ("prefill", "decode")}
    for row in result.rows:
        bound = float(result.bounds[row.workload].split("most " if row.workload == "decode" else ": ")[1]
                      .split(" tokens/s")[0].replace(",", ""))
        assert row.estimate.fits and row.tps < bound
    text = format_markdown(result)
    assert "no layer group fits" in text and "Why:" in text


@pytest.mark.parametrize("kind, group", [("prefill", 0), ("decode", 0), ("decode", 2)])
def test_stage_cost_broadcasts_over_micro_batches_and_layer_counts(kind, group):
    # The stage search scores every micro-batch and layer count in one call; each entry must
    # equal the scalar evaluation of that (micro-batch, layer count).
    import numpy as np

    from autotune.cost.contract import inference_stage_cost
    from autotune.cost.inference import inference_context
    from autotune.cost.stage import StagePosition
    from autotune.plan.plan import StagePlan

    model = load_preset("small")
    work = InferenceWorkload(kind=kind, batch=64, prompt_len=256, output_len=0 if kind == "prefill" else 16)
    stage = StagePlan(layers=(0, 3), has_embedding=True, has_head=False, num_gpus=1, tp=1, cp=1, dp=1,
                      kv_cache_in="host", cache_group_layers=group, cache_tile_tokens=4 if group else 0)
    pos = StagePosition(inflight=4.0, neighbors=1, p2p_inter_node=False)
    sizes = np.array([2, 4, 8])[:, None]
    many = inference_stage_cost(inference_context(model, work, H100, kind, runtime=NEUTRAL, micro_batch=sizes,
                                                  num_microbatches=64 // sizes), stage, pos,
                                num_layers=np.arange(1, 5)[None, :])
    one = inference_stage_cost(inference_context(model, work, H100, kind, runtime=NEUTRAL, micro_batch=4, num_microbatches=16),
                               stage, pos)
    assert many.time.microbatch_s.shape == (3, 4)
    assert many.time.microbatch_s[1, 2] == pytest.approx(one.time.microbatch_s)
    assert many.memory.peak_bytes[1, 2] == pytest.approx(one.memory.peak_bytes)
