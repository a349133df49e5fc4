"""An eager runtime's generate loop: the host's issue time bounds small-batch decode steps
(autotune/cost/decode_host.py; measured on a lent H200, tests/data/h200/infer-2026-11-27)."""

import json
from pathlib import Path

import pytest

from autotune.cost.decode_host import step_launches
from autotune.cost.evaluate import evaluate_plan
from autotune.cost.host import op_host_s
from autotune.plan.builders import uniform_plan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.hf_config import model_from_hf_config
from autotune.spec.runtime import load_runtime
from autotune.spec.workload import InferenceWorkload

H200 = load_cluster("dgx-h200")
DATA = Path(__file__).parent / "data" / "h200" / "infer-2026-11-27"
HF = Path(__file__).parent / "data" / "h200" / "hf"


def _model(name):
    return model_from_hf_config(HF / f"{name}.json")


def _decode(model, runtime, batch, prompt_len=512):
    work = InferenceWorkload(kind="decode", batch=batch, prompt_len=prompt_len, output_len=64)
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, global_batch=batch, has_embeddings=True, micro_batch=batch)
    return evaluate_plan(model, work, H200, plan, runtime=load_runtime(runtime))


def test_small_batch_transformers_decode_is_host_bound():
    model = _model("llama-3.2-1b")
    est = _decode(model, "transformers", 1)
    launches = step_launches(load_runtime("transformers"), model, model.num_layers, with_head=True)
    assert launches > 20 * model.num_layers
    # the step takes the host's issue time: launches x the host's seconds per kernel-launching operator
    assert est.inference.tpot_s == pytest.approx(launches * op_host_s(H200), rel=0.02)
    assert est.breakdown["host_s"] > est.breakdown["compute_s"]


def test_large_batch_decode_is_gpu_bound_and_engines_hide_the_host():
    model = _model("llama-3.1-8b")
    big = _decode(model, "transformers", 512, prompt_len=4096)
    assert big.breakdown["host_s"] == 0.0  # the GPU's step outlasts the host's issue
    # a runtime whose host runs ahead (CUDA graphs, a C++ engine) adds no host time
    vllm = _decode(model, "vllm", 1)
    assert vllm.breakdown.get("host_s", 0.0) == 0.0


def test_counted_launches_match_the_kernels_the_gpu_ran():
    # the lent H200's profiler counted every GPU activity of a generate decode step; the CPU count
    # from transformers' own code misses only kernels the CUDA libraries add (cuBLAS split-K)
    runtime = load_runtime("transformers")
    rows = [json.loads(line) for line in (DATA / "infer.jsonl").read_text().splitlines()][1:]
    config = {"llama-3.2-1b": "llama-3.2-1b", "qwen3-0.6b": "qwen3-0.6b", "qwen3-1.7b": "qwen3-1.7b",
              "llama-3.2-3b": "llama-3.2-3b", "qwen3-4b": "qwen3-4b", "llama-3.1-8b": "llama-3.1-8b"}
    for row in rows:
        model = _model(config[row["name"].split("_")[0]])
        counted = step_launches(runtime, model, model.num_layers, with_head=True)
        measured = row["decode_step_kernels"]["launches"]
        assert 0.8 * measured <= counted <= 1.05 * measured, row["name"]


def test_launch_counts_come_from_transformers_own_code():
    transformers = pytest.importorskip("transformers")
    from profilers.decode_ops import decode_launches

    data = json.loads((Path(__file__).parent.parent / "autotune" / "data" / "decode_launches.json").read_text())
    counted = decode_launches("transformers-llama")
    stored = data["streams"]["transformers-llama"]
    if transformers.__version__ == data["versions"]["transformers"]:
        assert counted == stored
    else:  # another version's generate loop may differ a little; its decoder layer's code path rarely
        assert counted["per_layer"] == pytest.approx(stored["per_layer"], rel=0.2)
        assert counted["per_step"] == pytest.approx(stored["per_step"], rel=0.3)


def test_a_cluster_states_its_hosts_measured_speed():
    from autotune.errors import AutotuneError
    from autotune.spec.hardware_data import cluster_from_dict

    lent = load_cluster(DATA / "lent-h200.toml")
    assert op_host_s(lent) == pytest.approx(op_host_s(H200) * 30.63 / 13.48)
    model = _model("llama-3.2-1b")
    work = InferenceWorkload(kind="decode", batch=1, prompt_len=512, output_len=64)
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, global_batch=1, has_embeddings=True, micro_batch=1)
    slow = evaluate_plan(model, work, lent, plan, runtime=load_runtime("transformers"))
    fast = evaluate_plan(model, work, H200, plan, runtime=load_runtime("transformers"))
    assert slow.inference.tpot_s == pytest.approx(fast.inference.tpot_s * 30.63 / 13.48, rel=0.01)
    table = {"device": "h200", "gpus_per_node": 1, "host_linear_fwd_s": 5.0,
             "intra_node": {"name": "nvlink4", "latency_s": 6.6e-6, "step_latency_s": 0.0, "bandwidth": 370e9},
             "host_link": {"name": "pcie5", "latency_s": 5e-6, "step_latency_s": 0.0, "bandwidth": 55e9}}
    with pytest.raises(AutotuneError) as err:
        cluster_from_dict("bad", table)
    assert err.value.field == "cluster.host_linear_fwd_s"


def test_dynamic_cache_concat_copies_the_cache_each_step():
    # transformers' DynamicCache appends with torch.cat: one read and one write of every layer's
    # K and V a step (the lent H200: 4.3 ms of Llama-3.1-8B's 17.3 ms step at 128 x 512)
    from autotune.errors import AutotuneError
    from autotune.spec.runtime import Runtime

    model = _model("llama-3.1-8b")
    runtime = load_runtime("transformers")
    assert runtime.kv_cache_append == "concat"
    work = InferenceWorkload(kind="decode", batch=128, prompt_len=512, output_len=32)
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, global_batch=128, has_embeddings=True, micro_batch=128)
    concat, in_place = (evaluate_plan(model, work, H200, plan, runtime=r).breakdown["compute_s"] / work.decode_steps
                        for r in (runtime, runtime.with_changes(kv_cache_append="in_place")))
    cache_bytes = 128 * model.cached_positions(work.mean_decode_context_len) * model.num_layers * \
        model.kv_cache_elements_per_token_per_layer() * 2
    copy_s = 2 * cache_bytes * H200.device.memory.seconds_per_unit  # read and write, at the memory line
    assert copy_s < concat - in_place < 2 * copy_s
    with pytest.raises(AutotuneError) as err:
        Runtime(name="x", kv_cache_append="append")
    assert err.value.field == "runtime.kv_cache_append"
