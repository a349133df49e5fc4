"""Tensor classes in host and CXL memory: transfers, overlap, capacity, training and inference."""

import subprocess
import sys

import pytest

import autotune as api
from autotune.cost.evaluate import evaluate_plan
from autotune.cost.offload import streamed_exposed_s, transfer_s
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.plan.plan import StagePlan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime
from autotune.spec.workload import InferenceWorkload

H100 = load_cluster("dgx-h100")
CXL = load_cluster("dgx-h100-cxl")
NEUTRAL = Runtime(name="neutral")  # the old default workload's settings: no host dispatch priced


def test_transfer_takes_the_slower_of_link_and_tier():
    # host: PCIe 52 GB/s (link) vs DDR5 70.4 GB/s per GPU (tier); CXL: the expander's 36 GB/s
    gb = 1e9
    assert transfer_s(H100, "host", 52 * gb) == pytest.approx(1.0 + 5e-6 + 1e-7)
    assert transfer_s(CXL, "cxl", 36 * gb) == pytest.approx(1.0 + 5e-6 + 2.7e-7)
    assert transfer_s(H100, "host", 0.0) == 0.0


def test_streaming_exposes_only_what_compute_cannot_hide():
    # 4 layers, transfer 1 s and compute 2 s per layer: hidden except the first transfer, which
    # 8 micro-batches share; transfer 3 s: each layer leaves 1 s exposed.
    assert streamed_exposed_s(1.0, 2.0, 4, 1) == pytest.approx(1.0)
    assert streamed_exposed_s(1.0, 2.0, 4, 8) == pytest.approx(1.0 / 8)
    assert streamed_exposed_s(3.0, 2.0, 4, 8) == pytest.approx(4 * 1.0)
    assert streamed_exposed_s(3.0, 2.0, 0, 8) == 0.0


def test_cxl_needs_a_cluster_with_cxl_memory():
    model = load_preset("llama3-8b")
    work = InferenceWorkload(kind="decode", batch=8, prompt_len=512, output_len=4)
    plan = uniform_plan(num_layers=32, gpus=1, micro_batch=8, global_batch=8, kv_cache_in="cxl")
    with pytest.raises(AutotuneError) as err:
        evaluate_plan(model, work, H100, plan, runtime=NEUTRAL)
    assert err.value.field == "placement" and "dgx-h100-cxl" in err.value.message
    est = evaluate_plan(model, work, CXL, plan, runtime=NEUTRAL)
    assert est.fits and est.breakdown["offload_s"] > 0


def test_training_a_model_too_large_for_its_gpus():
    # gpt3-175b on 16 H100 (tp 8, pp 2): ~11e9 parameters per GPU need 18 bytes each in HBM.
    # Offloading weights, gradients and the optimizer to host memory (ZeRO-Offload) makes it fit.
    base = dict(cluster="dgx-h100", tp=8, pp=2, micro_batch=1, global_batch=64, recompute="full", runtime=NEUTRAL)
    plain = api.evaluate("gpt3-175b", 16, **base)
    assert not plain.fits
    off = api.evaluate("gpt3-175b", 16, weights_in="host", gradients_in="host", optimizer_in="host",
                       activations_in="host", **base)
    assert off.fits, off.reason
    assert off.memory_breakdown["offloaded_bytes"] > 150 * 2**30
    assert off.peak_memory_bytes_per_gpu < 40 * 2**30
    assert off.breakdown["offload_s"] > 0
    # the CPU Adam step over host memory is much slower than the GPU's
    assert off.breakdown["optimizer_s"] > 10 * plain.breakdown["optimizer_s"]


def test_offload_beyond_the_tier_capacity_does_not_fit():
    host = H100.device.tier("host")
    small_host = H100.with_changes(device=H100.device.with_changes(
        tiers=tuple(t if t.name != "host" else host.__class__(name="host", capacity_bytes=1e9,
                    bandwidth_bytes_per_s=host.bandwidth_bytes_per_s, latency_s=host.latency_s) for t in H100.device.tiers)))
    est = api.evaluate("gpt3-13b", 8, cluster=small_host, tp=8, optimizer_in="host")
    assert not est.fits and "host memory" in est.reason


def test_optimizer_offload_frees_its_bytes_and_moves_the_step():
    base = dict(cluster="dgx-h100", tp=8, micro_batch=1, runtime=NEUTRAL)
    plain = api.evaluate("gpt3-13b", 8, **base)
    off = api.evaluate("gpt3-13b", 8, optimizer_in="host", **base)
    assert off.memory_breakdown["optimizer_states_bytes"] == 0
    assert off.memory_breakdown["offloaded_bytes"] == pytest.approx(plain.memory_breakdown["optimizer_states_bytes"])
    assert off.step_time_s > plain.step_time_s


@pytest.mark.parametrize("kwargs, field", [
    (dict(weights_in="host"), "weights_in"),
    (dict(kv_cache_in="host"), "kv_cache_in"),
])
def test_training_placement_rules(kwargs, field):
    with pytest.raises(AutotuneError) as err:
        api.evaluate("gpt3-1.3b", 8, tp=2, **kwargs)
    assert err.value.field == field


def test_gradients_follow_the_optimizer():
    with pytest.raises(AutotuneError) as err:
        StagePlan(layers=(0, 4), has_embedding=True, has_head=True, num_gpus=1, tp=1, cp=1, dp=1, gradients_in="host")
    assert err.value.field == "gradients_in"


def test_kv_cache_share_trades_hbm_for_link_time():
    model = load_preset("seed-dense-16")
    work = InferenceWorkload(kind="decode", batch=128, prompt_len=9999, output_len=1)
    ests = [evaluate_plan(model, work, H100, uniform_plan(num_layers=16, gpus=16, tp=8, pp=2, micro_batch=32,
                                                           global_batch=128, kv_cache_in="host", kv_cache_in_share=s),
                          runtime=NEUTRAL)
            for s in (0.05, 0.5, 1.0)]
    peaks = [e.peak_memory_bytes_per_gpu for e in ests]
    offload = [e.breakdown["offload_s"] for e in ests]
    assert peaks[0] > peaks[1] > peaks[2] and offload[0] < offload[1] < offload[2]
    # the whole cache in HBM does not fit; the 5% share does and is 10x faster than all in host
    hbm = evaluate_plan(model, work, H100, uniform_plan(num_layers=16, gpus=16, tp=8, pp=2, micro_batch=32,
                                                        global_batch=128), runtime=NEUTRAL)
    assert not hbm.fits and ests[0].fits
    assert ests[0].inference.tps > 10 * ests[2].inference.tps


def test_zero_bandwidth_tier_in_a_cluster_file_is_bad_input(tmp_path):
    text = (tmp_path / "c.toml")
    text.write_text('device = "h100"\ngpus_per_node = 8\n'
                    '[intra_node]\nlatency_s = 1e-6\nstep_latency_s = 1e-7\nbandwidth = 1e11\n'
                    '[host_link]\nlatency_s = 1e-6\nstep_latency_s = 0\nbandwidth = 5e10\n'
                    '[[tiers]]\nname = "cxl"\ncapacity_bytes = 1e11\nbandwidth_bytes_per_s = 0\nlatency_s = 1e-7\n')
    proc = subprocess.run([sys.executable, "-m", "autotune", "evaluate", "--model", "gpt3-1.3b", "--gpus", "8",
                           "--cluster", str(text)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "tiers.cxl.bandwidth_bytes_per_s" in proc.stderr and "Traceback" not in proc.stderr
