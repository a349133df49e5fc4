"""vLLM 0.6's asynchronous output processor learns that a request finished only while the step after its
last token runs, a step the scheduler made before (scheduler.py _schedule_running 0.6.0: 'With async
postprocessor, an extra decode run is done to process the final tokens'): the request keeps its slot and
KV through that scheduling. Under multi-step only a call's last step's outputs wait so; and with
requests waiting a multi-step call runs all its steps (llm_engine.py step: no scheduling while steps remain)."""

from __future__ import annotations

import numpy as np

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def _step():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("vllm-0.6"), tp=1, weight_dtype="bf16")
    return run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=100, output_len=2)).step


def _schedule(overlap: str, steps: int = 1, seqs: int = 1) -> Schedule:
    return Schedule(scheduler="prefill_first", chunked_prefill=False, prefill_chunk_tokens=0, max_num_seqs=seqs,
                    max_num_batched_tokens=4096, kv_capacity_tokens=100_000, kv_block_tokens=16,
                    kv_reservation="grow", scheduler_steps=steps, host_overlap=overlap)


def _two(output_len: int) -> Requests:
    return Requests(arrival_s=np.zeros(2), input_len=np.full(2, 100), output_len=np.full(2, output_len))


def test_only_async_output_processing_finishes_late():
    assert _schedule("output").late_finish
    assert not _schedule("none").late_finish and not _schedule("all").late_finish


def test_a_finished_request_holds_its_slot_through_the_next_scheduling():
    step = _step()
    # one slot: the second prompt waits for the first request's slot
    sync, late = (simulate(_two(3), _schedule(o), step) for o in ("none", "output"))
    # synchronous: prefill, 2 decodes, then the second request's prefill and 2 decodes
    assert sync.steps == 6
    # async: the first request's last decode is followed by one more decode of it before its slot frees
    assert late.steps == 7
    assert late.first_token_s[1] > sync.first_token_s[1]
    # the first request's own tokens are not delayed by its late release
    assert late.finish_s[0] == sync.finish_s[0]


def test_a_slot_is_not_held_when_the_engine_is_not_full():
    step = _step()
    sync, late = (simulate(_two(3), _schedule(o, seqs=2), step) for o in ("none", "output"))
    assert late.steps == sync.steps
    assert np.array_equal(late.first_token_s, sync.first_token_s)


def test_a_multi_step_call_runs_out_while_requests_wait():
    step = _step()
    # ten steps a call; the first request needs 4 decodes after its prompt: the call runs all ten, the request
    # finishes inside it (not at its last step), so its slot is free at the call's end
    trace = simulate(_two(5), _schedule("output", steps=10), step)
    # prompt 1, a 10-step call, prompt 2, then a call cut where nothing else waits (4 steps)
    assert trace.steps == 1 + 10 + 1 + 4
    # synchronously the same calls: a request finishing inside a call is processed within it
    assert simulate(_two(5), _schedule("none", steps=10), step).steps == trace.steps


def test_a_multi_step_request_finishing_at_the_calls_last_step_holds_its_slot():
    step = _step()
    # 10 decodes after its prompt: its last token comes at the call's last step
    late, sync = (simulate(_two(11), _schedule(o, steps=10), step) for o in ("output", "none"))
    assert late.steps == sync.steps + 10  # one more call of it before the second prompt
