"""Memory that means "it runs": beyond the tensors, the device's reserved bytes (CUDA context,
library modules) and the runtime's allocator reserve (PyTorch's caching allocator), and a plan
within the uncertainty of its tensors' bytes of the limit reported as such."""

import json
from pathlib import Path

import pytest

import autotune
from autotune.cost.evaluate import evaluate_plan
from autotune.cost.memory import TENSOR_BYTES_UNCERTAINTY, StageMemory, memory_at_risk
from autotune.errors import AutotuneError
from autotune.outputs.report import memory_line
from autotune.plan.io import read_plan_file
from autotune.spec.resolve import resolve_cluster
from autotune.spec.runtime import Runtime, load_runtime

H200 = Path(__file__).parent / "data" / "h200"
GIB = 2.0**30


def _z_plan():
    return read_plan_file(H200 / "plans" / "z-llama8b.json")


def test_the_plan_that_ran_out_of_memory_on_an_h200_does_not_fit():
    # llama3-8b, 1 x 8 micro-batches, full recomputation: 135.24 GiB allocated when it asked for
    # 1002 MiB more, with 2.44 GiB reserved but unallocated (tests/data/h200/runs.json)
    z = _z_plan()
    for name in ("torch", "megatron"):
        est = evaluate_plan(z.model, z.workload, resolve_cluster("dgx-h200"), z.plan, runtime=load_runtime(name))
        assert not est.fits, name
        assert est.memory_breakdown["allocator_bytes"] > 2.44 * GIB
    # without an allocator reserve (the neutral runtime, as before) it was predicted to fit
    neutral = evaluate_plan(z.model, z.workload, resolve_cluster("dgx-h200"), z.plan, runtime=Runtime(name="neutral"))
    assert neutral.fits and neutral.memory_at_risk


def test_search_leaves_the_headroom():
    with pytest.raises(AutotuneError) as err:  # eager PyTorch cannot hold llama3-8b's states on one H200
        autotune.search("llama3-8b", 1, cluster="dgx-h200", global_batch=8, seq_len=2048, runtime="torch")
    assert err.value.field == "gpus" and "needs at least 2 GPUs" in str(err.value)
    result = autotune.search("llama3-8b", 1, cluster="dgx-h200", global_batch=8, seq_len=2048)  # megatron
    est = result.estimate
    capacity = resolve_cluster("dgx-h200").device.memory_bytes
    share = load_runtime("megatron").allocator_reserve_share
    tensors = est.peak_memory_bytes_per_gpu - est.memory_breakdown["allocator_bytes"] - est.memory_breakdown["reserved_bytes"]
    assert est.memory_breakdown["allocator_bytes"] == pytest.approx(share * tensors)
    assert est.fits and est.peak_memory_bytes_per_gpu <= capacity
    assert est.peak_memory_bytes_per_gpu < 139 * GIB  # not the plan that ran out of memory


def test_allocator_reserve_scales_with_the_tensors():
    mem = StageMemory(weights_bytes=10.0, gradients_bytes=20.0, optimizer_states_bytes=30.0, activations_bytes=30.0,
                      temporary_bytes=10.0, reserved_bytes=5.0, allocator_share=0.05)
    assert mem.tensor_bytes == 100.0 and mem.allocator_bytes == pytest.approx(5.0)
    assert mem.peak_bytes == pytest.approx(110.0) and mem.as_dict()["allocator_bytes"] == pytest.approx(5.0)
    grown = 110.0 + TENSOR_BYTES_UNCERTAINTY * 105.0
    assert memory_at_risk(mem, 112.0) and not memory_at_risk(mem, grown + 1.0) and not memory_at_risk(mem, 109.0)


def test_a_plan_near_the_limit_is_reported_as_such():
    z = _z_plan()
    est = evaluate_plan(z.model, z.workload, resolve_cluster("dgx-h200"), z.plan, runtime=Runtime(name="neutral"))
    line = memory_line(est, est.memory_capacity_bytes)
    assert "may not fit" in line and "tensors" in line and "reserved" in line
    roomy = autotune.evaluate("gpt3-1.3b", 1, cluster="dgx-h200", global_batch=8, seq_len=2048, micro_batch=8,
                              runtime="torch")
    text = memory_line(roomy, roomy.memory_capacity_bytes)
    assert not roomy.memory_at_risk and "may not fit" not in text and "allocator reserve" in text
    assert roomy.to_dict()["memory_at_risk"] is False


def test_measured_allocator_overhead_is_within_the_runtime_reserve():
    runs = json.loads((H200 / "runs.json").read_text())["runs"]
    ratios = [r["peak_reserved_bytes"] / r["peak_allocated_bytes"] - 1.0 for r in runs if r["peak_reserved_bytes"]]
    assert len(ratios) == 3
    for name in ("torch", "transformers"):
        assert max(ratios) <= load_runtime(name).allocator_reserve_share + 5e-4


@pytest.mark.parametrize("value", [-0.1, 1.0, True, "0.05"])
def test_allocator_reserve_share_is_validated(value):
    with pytest.raises(AutotuneError) as err:
        Runtime(name="x", allocator_reserve_share=value)
    assert err.value.field == "runtime.allocator_reserve_share"
