"""SGLang's chunked-prefill size is a budget for the whole prompt batch, not a cap per request: PrefillAdder starts
rem_chunk_tokens at --chunked-prefill-size, takes each added request's extend tokens off it, truncates the request that
does not fit to what is left and adds none once it is spent (policy_scheduler.py 0.3.0, schedule_policy.py 0.4.0,
0.5.6, 0.5.12); --max-prefill-tokens is the other budget (Schedule.prompt_step_tokens)."""

from __future__ import annotations

import numpy as np

from autotune.cost.serving_eval import ServingDeployment, run_serving
from autotune.cost.serving_load import Load
from autotune.cost.serving_run import Requests
from autotune.cost.serving_sim import Schedule, simulate
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime


def _run():
    dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("sglang"), tp=1, weight_dtype="bf16")
    return run_serving(dep, Load(kind="max_throughput", num_requests=2, input_len=512, output_len=16))


def _schedule(run, *, chunk: int, budget: int, scheduler: str = "prefill_first", chunked: bool = True) -> Schedule:
    return Schedule(scheduler=scheduler, chunked_prefill=chunked, prefill_chunk_tokens=chunk, max_num_seqs=64,
                    max_num_batched_tokens=budget, kv_capacity_tokens=run.limits.kv_capacity_tokens, kv_block_tokens=1,
                    kv_reservation="grow")


def test_the_step_budget_is_the_smaller_of_chunk_and_prefill_tokens_where_prompts_are_chunked():
    run = _run()
    assert _schedule(run, chunk=8192, budget=16384).prompt_step_tokens == 8192
    assert _schedule(run, chunk=32768, budget=16384).prompt_step_tokens == 16384
    assert _schedule(run, chunk=0, budget=16384).prompt_step_tokens == 16384  # 0: the token budget
    assert _schedule(run, chunk=8192, budget=16384, chunked=False).prompt_step_tokens == 16384


def test_sixteen_prompts_arriving_at_once_fill_one_chunk_a_step_not_one_budget():
    """16 prompts of 1,000 tokens at once under an 8,192-token chunk and a 16,384-token prefill budget: SGLang
    prefills 8 whole prompts and 192 tokens of the 9th in its first step, so the 9th to 16th get their first token
    a step later than the first 8; a per-request cap would have taken all 16 in one step (16,000 tokens)."""
    run = _run()
    n = 16
    req = Requests(arrival_s=np.zeros(n), input_len=np.full(n, 1000), output_len=np.full(n, 4))
    chunked = simulate(req, _schedule(run, chunk=8192, budget=16384), run.step)
    whole = simulate(req, _schedule(run, chunk=16384, budget=16384), run.step)
    assert np.unique(whole.first_token_s).size == 1  # one step of 16,000 tokens
    first = chunked.first_token_s
    assert np.all(first[:8] == first[0]) and np.all(first[8:] > first[0])
    assert chunked.prefilled_tokens == whole.prefilled_tokens == n * 1000


def test_sglang_picks_its_chunk_by_gpu_memory_unless_the_launch_sets_one():
    """server_args.py _handle_gpu_memory_settings (0.5.6, 0.5.12): 8192 on H100 / H200, 16384 on B200 (the driver's
    MiB above 160 x 1024); a row's --chunked-prefill-size replaces the rule."""
    from autotune.calibrate.serving_flags import limit_flags

    engine = load_runtime("sglang").serving
    h100, h200, b200 = (load_cluster(name).device.memory_bytes for name in ("dgx-h100", "dgx-h200", "dgx-b200"))
    assert [engine.chunk_tokens_on(m) for m in (h100, h200, b200)] == [8192, 8192, 16384]
    flagged = engine.with_changes(**limit_flags("launch: --chunked-prefill-size 4096"))
    assert flagged.chunk_tokens_on(b200) == 4096


def test_each_sglang_release_picks_the_chunk_its_server_args_sets_on_each_gpu():
    """0.4.0-0.4.6: 8192 on every GPU of 25 GB and more; 0.4.7: 16384 above 180,000 MiB; 0.4.8-0.5.5: tiers at 35 and
    160 GiB (server_args.py __post_init__ in each wheel); 0.5.6 on: sglang.toml's tiers. B200 and GB200 report 183,359
    and 189,471 MiB, H200 143,774."""
    from autotune.calibrate.serving_rows import engine_runtime

    gpus = [load_cluster(name).device.memory_bytes for name in ("dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72")]
    chunks = {version: [engine_runtime("sglang", version).serving.chunk_tokens_on(m) for m in gpus]
              for version in ("0.4.6", "0.4.7", "0.4.10", "0.5.0rc2", "0.5.6")}
    assert chunks["0.4.6"] == [8192] * 4
    assert chunks["0.4.7"] == chunks["0.4.10"] == chunks["0.5.0rc2"] == chunks["0.5.6"] == [8192, 8192, 16384, 16384]
    small = 30 * 2**30  # an A10-class GPU: 2048 from 0.4.8, 8192 under 0.4.7's 25,000 MiB line
    assert [engine_runtime("sglang", v).serving.chunk_tokens_on(small) for v in ("0.4.7", "0.4.8")] == [8192, 2048]


def test_a_b200_under_0_5_0_prefills_sixteen_prompts_in_one_step_where_0_4_0_takes_two():
    """16 prompts of 1,000 tokens arriving at once on a B200: 0.5.0's 16,384-token chunk takes them all in its first
    prompt step, 0.4.0's 8,192 takes 8 and part of the 9th; the step's budget follows the release's chunk."""
    n = 16
    req = Requests(arrival_s=np.zeros(n), input_len=np.full(n, 1000), output_len=np.full(n, 4))
    firsts = {}
    for name in ("sglang-0.4", "sglang-0.4.8"):
        dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-b200"),
                                runtime=load_runtime(name), tp=1, weight_dtype="bf16")
        run = run_serving(dep, Load(kind="max_throughput", num_requests=2, input_len=1000, output_len=4))
        chunk = dep.runtime.serving.chunk_tokens_on(dep.cluster.device.memory_bytes)
        firsts[name] = simulate(req, _schedule(run, chunk=chunk, budget=16384), run.step).first_token_s
    assert np.unique(firsts["sglang-0.4.8"]).size == 1
    assert np.unique(firsts["sglang-0.4"]).size == 2


def test_sglang_0_4_8_replays_decode_graphs_up_to_256_on_h200_and_512_on_b200():
    """cuda_graph_runner.py get_batch_sizes_to_capture (0.4.8-0.5.2): 160, to 256 above 90 GiB, to 512 above 160,000
    MiB; 0.4.0 captures up to 160 everywhere; a row's --cuda-graph-max-bs replaces the rule."""
    from autotune.calibrate.serving_flags import limit_flags

    engine = load_runtime("sglang-0.4.8").serving
    h100, h200, b200 = (load_cluster(name).device.memory_bytes for name in ("dgx-h100", "dgx-h200", "dgx-b200"))
    assert [engine.graph_max_on(m) for m in (h100, h200, b200)] == [160, 256, 512]
    assert load_runtime("sglang-0.4").serving.graph_max_on(b200) == 160
    assert engine.with_changes(**limit_flags("--cuda-graph-max-bs 640")).graph_max_on(h200) == 640


def test_an_h200_decoding_200_requests_runs_faster_where_its_graphs_cover_the_batch():
    """200 requests decoding at once on an H200 (the chunk the same 8,192 in both): 0.4.0 decodes them eagerly, its
    host issuing every operator, 0.4.8 replays a graph."""
    load = Load(kind="concurrency", num_requests=400, input_len=128, output_len=256, concurrency=200)
    ends = {}
    for name in ("sglang-0.4", "sglang-0.4.8"):
        dep = ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h200"),
                                runtime=load_runtime(name), tp=1, weight_dtype="bf16")
        ends[name] = float(np.max(run_serving(dep, load).trace.finish_s))
    assert ends["sglang-0.4.8"] < 0.95 * ends["sglang-0.4"]
