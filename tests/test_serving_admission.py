"""SGLang's admission rule in the serving simulation: a request waits until its prompt and its whole
output fit beside the running requests' expected output (managers/policy_scheduler.py PrefillAdder
in sglang 0.3.0, managers/schedule_policy.py in 0.5.x), the estimate's ratio decaying each decode
step, reset when the engine idles and re-estimated on a retraction."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from autotune.cost.serving_admission import (OutputReserve, decayed_ratio, output_reserve, ratio_after_retraction,
                                              reserve_room, retraction_victims, steps_until_admitted)
from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_sim import Requests, Schedule, simulate
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

RULE_030 = OutputReserve(init_ratio=0.7, min_ratio=0.1, decay_per_step=0.001, retract_decode_steps=20,
                         clip_tokens=4096, ignore_eos_full=False)


def _step():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("sglang-0.3"), tp=1, weight_dtype="bf16")
    return run_serving(dep, Load(kind="max_throughput", num_requests=1, input_len=100, output_len=2)).step


def _schedule(reserve, capacity):
    return Schedule(scheduler="prefill_first", chunked_prefill=True, prefill_chunk_tokens=8192, max_num_seqs=1000,
                    max_num_batched_tokens=16384, kv_capacity_tokens=capacity, kv_block_tokens=1,
                    kv_reservation="grow", reserve=reserve)


def test_the_presets_name_the_rule_of_their_engine():
    for name in ("sglang-0.3", "sglang"):
        engine = load_runtime(name).serving
        assert engine.admission == "reserve_output" and output_reserve(engine) is not None
    for name in ("vllm-0.6", "vllm", "tensorrt-llm-0.14", "tensorrt-llm-0.17", "tensorrt-llm", "mlperf-nvidia-4.1"):
        assert output_reserve(load_runtime(name).serving) is None, name
    # 0.5.x derives its decay: (init - init x 0.14) / 600 steps (new_token_ratio_tracker.py)
    new = load_runtime("sglang").serving
    assert new.new_token_ratio_decay == pytest.approx((0.7 - 0.7 * 0.14) / 600)
    assert new.ignore_eos_reserves_all and not load_runtime("sglang-0.3").serving.ignore_eos_reserves_all


def test_prompt_only_admission_retracts_where_the_reserve_rule_does_not():
    # 60 requests of 100 + 200 tokens (run to length, as ignore_eos) on a 10,000-token pool: by prompts alone
    # all 60 start and outgrow the pool (18,000 tokens) and retracted ones prefill again. SGLang 0.5 reserves
    # all of a running ignore_eos request's output: never over the pool. SGLang 0.3 expects 0.7 of it, so
    # it over-commits, but less
    load = Requests(arrival_s=np.zeros(60), input_len=np.full(60, 100), output_len=np.full(60, 200))
    step = _step()
    prompt_only = simulate(load, _schedule(None, 10_000), step).prefilled_tokens
    new = simulate(load, _schedule(output_reserve(load_runtime("sglang").serving), 10_000), step).prefilled_tokens
    old = simulate(load, _schedule(RULE_030, 10_000), step).prefilled_tokens
    assert new == 6000 < old < prompt_only


def test_a_waiting_request_enters_at_the_first_step_its_room_appears():
    # one request decoding (100 prompt, 1000 to generate), one waiting (100 + 680) on 1,500 slots: after j
    # decode steps the room is 1,500 - (100 + j) - (1000 - j)(0.7 - 0.001 j) (remove_running_tokens)
    st = SimpleNamespace(running=np.array([0]), done=np.array([100, 0]), prompt=np.array([100, 100]),
                         generated=np.array([1, 0]), g0=np.ones(2, dtype=int), waiting=deque([1]),
                         ratio_base=0.7, ratio_decays=0,
                         req=SimpleNamespace(input_len=np.array([100, 100]), output_len=np.array([1001, 680])))
    room = [1500 - (100 + j) - (1000 - j) * (0.7 - 0.001 * j) for j in range(0, 999)]
    assert room[0] <= 780  # not now
    expected = next(j for j, r in enumerate(room) if 780 < r)
    assert steps_until_admitted(st, RULE_030, 1500, np.array([0]), 998) == expected == 144
    st.ratio_base = 0.1  # a floor-level estimate admits at once (one step being the least a stretch takes)
    assert steps_until_admitted(st, RULE_030, 1500, np.array([0]), 998) == 1
    assert reserve_room(st, RULE_030, 1500) == pytest.approx(1500 - 100 - 1000 * 0.1)


def test_a_decoding_request_lets_the_next_in_as_the_ratio_decays_then_retracts_it():
    # the same two requests simulated: A (100 + 1001) runs alone; B (100 + 680) enters after 144 decode
    # steps, when A has generated 145 tokens (above). Then both decode until their KV for the next step,
    # 200 + (145 + m) + (1 + m), passes 1,500: m = 578, and B (fewest generated: 579) is retracted and
    # prefills its prompt and 578 generated tokens again, after A finishes (A's 278 tokens left x the new
    # ratio (723 + 20) / 1001 leave it no room). Without the decay B would wait for A and nothing is recomputed.
    load = Requests(arrival_s=np.zeros(2), input_len=np.array([100, 100]), output_len=np.array([1001, 680]))
    trace = simulate(load, _schedule(RULE_030, 1_500), _step())
    assert trace.prefilled_tokens == 200 + 678
    assert trace.first_token_s[1] < trace.finish_s[0] < trace.finish_s[1]
    steady = simulate(load, _schedule(replace(RULE_030, decay_per_step=0.0), 1_500), _step())
    assert steady.prefilled_tokens == 200 and steady.first_token_s[1] > steady.finish_s[0]


def test_the_ratio_decays_per_decode_step_to_its_floor():
    assert float(decayed_ratio(RULE_030, 0.7, 100)) == pytest.approx(0.6)
    assert float(decayed_ratio(RULE_030, 0.7, 10_000)) == 0.1


def test_a_retraction_frees_the_youngest_and_re_estimates_the_ratio():
    # three running requests (held KV: prompt done + generated - 1), pool 1,000 tokens
    st = SimpleNamespace(running=np.array([0, 1, 2]), done=np.array([300, 300, 200]), prompt=np.array([300, 300, 200]),
                         generated=np.array([50, 10, 10]), g0=np.ones(3, dtype=int),
                         req=SimpleNamespace(input_len=np.array([300, 300, 200]), output_len=np.array([400, 400, 100])))
    # held 349 + 309 + 209 = 867 of 900, free 33 < 3 x 20: the fewest generated, then the longest prompt
    # (request 1), until 33 + 309 >= 2 x 20
    assert retraction_victims(st, RULE_030, 900) == [1]
    assert retraction_victims(st, RULE_030, 1000) == []  # 133 free: room enough
    st.running = np.array([0, 2])
    # (50 + 10 + 20 x 2) / (400 + 100)
    assert ratio_after_retraction(st, RULE_030) == pytest.approx(0.2)


def test_an_idle_engine_forgets_the_decay():
    # two identical bursts far apart: the second finds the ratio back at 0.7 and runs as the first did
    n, gap = 20, 1e4
    arrival = np.concatenate([np.zeros(n), np.full(n, gap)])
    load = Requests(arrival_s=arrival, input_len=np.full(2 * n, 100), output_len=np.full(2 * n, 500))
    trace = simulate(load, _schedule(RULE_030, 6_000), _step())
    assert np.all(trace.finish_s[:n] < gap)
    first, second = trace.first_token_s[:n], trace.first_token_s[n:] - gap
    assert second == pytest.approx(first, rel=1e-9, abs=1e-9)
    assert len(set(np.round(first, 9))) > 1  # the burst did not all start at once: the rule held some back


def test_the_rule_is_refused_where_sglang_does_not_run_it():
    engine = load_runtime("sglang-0.3").serving
    with pytest.raises(AutotuneError, match="serving.admission"):
        engine.with_changes(kv_reservation="full")
    with pytest.raises(AutotuneError, match="new_token_ratio"):
        engine.with_changes(new_token_ratio_min=0.8)
    with pytest.raises(AutotuneError, match="serving.admission"):
        engine.with_changes(admission="reserve")
