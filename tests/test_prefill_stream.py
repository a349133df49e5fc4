"""transformers' generate prefill priced from its own captured kernels (profilers/opstreams.py
transformers-prefill-*; measured on a lent H200, tests/data/h200/infer-2026-11-27/prefill.jsonl)."""

import json
from collections import Counter
from pathlib import Path

import pytest

from autotune.cost.inference import inference_tables, prefill_stream
from autotune.graph.opstream import load_stream
from autotune.plan.builders import uniform_plan
from autotune.cost.evaluate import evaluate_plan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.hf_config import model_from_hf_config
from autotune.spec.runtime import load_runtime
from autotune.spec.workload import InferenceWorkload

DATA = Path(__file__).parent / "data" / "h200"


def test_the_prefill_stream_is_a_bf16_forward_that_fills_the_cache():
    layer = load_stream("transformers-prefill-llama")["blocks"]["layer"]["kernels"]
    assert {k["phase"] for k in layer} == {"fwd"}
    assert not any(k["weight_cast"] for k in layer)  # bf16 weights: nothing cast per pass
    ops = Counter(k["op"] for k in layer)
    assert ops["aten.mm"] == 7 and ops["attention"] == 1
    assert ops["aten.cat"] == 4  # rotary's rotate_half for q and k, the DynamicCache's K and V


def _prefill(name, batch, prompt_len, runtime=None):
    model = model_from_hf_config(DATA / "hf" / f"{name}.json")
    work = InferenceWorkload(kind="prefill", batch=batch, prompt_len=prompt_len, output_len=0)
    plan = uniform_plan(num_layers=model.num_layers, gpus=1, global_batch=batch, has_embeddings=True, micro_batch=batch)
    return model, work, evaluate_plan(model, work, load_cluster("dgx-h200"), plan, runtime=runtime or load_runtime("transformers"))


def test_transformers_prefill_is_priced_from_its_stream_and_nearer_the_h200():
    measured = {r["name"]: r["ttft_s"] for r in map(json.loads, (DATA / "infer-2026-11-27" / "prefill.jsonl").open())
                if "name" in r}
    model, work, est = _prefill("llama-3.1-8b", 32, 1024)
    assert prefill_stream(model, work, load_runtime("transformers")) == "transformers-prefill-llama-untied"
    assert inference_tables(model, work, "prefill", load_runtime("transformers")).op_stream
    # the hand-written graph (the same runtime without its streams) misses eager elementwise kernels
    _, _, generic = _prefill("llama-3.1-8b", 32, 1024, runtime=load_runtime("transformers").with_changes(op_stream=""))
    truth = measured["llama-3.1-8b_b32_p1024"]
    assert abs(est.inference.ttft_s - truth) < abs(generic.inference.ttft_s - truth)
    assert est.inference.ttft_s == pytest.approx(truth, rel=0.25)


def test_quantized_or_unfused_attention_prefill_keeps_the_graph():
    model = model_from_hf_config(DATA / "hf" / "llama-3.2-1b.json")
    runtime = load_runtime("transformers")
    fp8 = InferenceWorkload(kind="prefill", batch=1, prompt_len=128, output_len=0, dtype="fp8")
    assert prefill_stream(model, fp8, runtime) == ""
    assert prefill_stream(model, InferenceWorkload(kind="prefill", batch=1, prompt_len=128, output_len=0),
                          load_runtime("megatron")) == ""


@pytest.mark.slow
def test_the_shipped_prefill_stream_is_what_transformers_runs(tmp_path):
    pytest.importorskip("transformers")
    from profilers.opstreams import write_streams

    (path,) = write_streams(tmp_path, ["transformers-prefill-llama"])
    fresh, shipped = json.loads(path.read_text()), load_stream("transformers-prefill-llama")
    if fresh["versions"] == shipped["versions"]:
        assert fresh["blocks"] == shipped["blocks"]
    else:  # another transformers: its decoder layer issues the same kernels
        ops = [Counter((k["op"], k["class"]) for k in data["blocks"]["layer"]["kernels"]) for data in (fresh, shipped)]
        assert ops[0] == ops[1]


def test_inference_memory_matches_what_torch_allocated_on_the_h200():
    # generate's peak: weights, the KV cache, and the prefill's live tensors as the captured
    # forward holds them; against torch.cuda.max_memory_allocated (the device's reserved bytes,
    # CUDA context and workspaces, are not allocations)
    runtime, cluster = load_runtime("transformers"), load_cluster("dgx-h200")
    folder = DATA / "infer-2026-11-27"
    rows = [r for f in ("infer.jsonl", "blind2.jsonl") for r in map(json.loads, (folder / f).open()) if "name" in r]
    assert len(rows) == 17
    for row in rows:
        model = model_from_hf_config(row["config"])
        work = InferenceWorkload(kind="serve", batch=row["batch"], prompt_len=row["prompt_len"],
                                 output_len=row["output_len"])
        plan = uniform_plan(num_layers=model.num_layers, gpus=1, global_batch=row["batch"], has_embeddings=True,
                            micro_batch=row["batch"])
        est = evaluate_plan(model, work, cluster, plan, runtime=runtime)
        allocated = est.peak_memory_bytes_per_gpu - cluster.device.reserved_bytes
        assert allocated == pytest.approx(row["peak_allocated_bytes"], rel=0.05), row["name"]
