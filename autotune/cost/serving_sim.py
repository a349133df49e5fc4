"""A serving engine's scheduler, step by step, on one replica: who runs, for how long, when tokens come.

The engine's loop (vLLM's ``LLMEngine.step``, SGLang's ``forward_step``, TensorRT-LLM's in-flight
batching) is played forward with the step costs of autotune/cost/serving_step.py: each step the
scheduler picks decodes and prompt chunks under the engine's limits (autotune/cost/serving_limits.py),
the step takes its GPU time plus the host time the GPU waits for, and every request's first token,
later tokens and finish are stamped. Requests arrive as the load says (autotune/cost/serving_load.py):
all at once, one per finished request (fixed concurrency), or at Poisson times (a request rate).
Like Vidur (Agrawal et al., MLSys 2024) the simulation is of the scheduler, each step priced whole.

Between events (an arrival, a finish, the KV cache filling up) the steps are pure decodes of one
batch whose context grows by the batch size each step, so their times form an arithmetic
progression; such stretches are advanced in one move, which keeps a run of thousands of
long requests to as many moves as it has events.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from autotune.cost.graph_padding import padded_batch
from autotune.cost.serving_adp import AdpCounters, hold_context, idle_iterations
from autotune.cost.serving_admission import output_need, reserve_room, steps_until_admitted
from autotune.cost.serving_kv import held_tokens, kv_tokens, make_room, steps_in_kv, whole_blocks
from autotune.cost.serving_rank_budget import mixed_budget
from autotune.cost.serving_host import delivered_at, frontend_streams, step_wall_s
from autotune.cost.serving_run import Requests, Schedule, Trace
from autotune.cost.serving_step import StepModel
from autotune.errors import require

__all__ = ["Requests", "Schedule", "Trace", "simulate"]


@dataclass(kw_only=True)
class _State:
    """Mutable state of one simulation (private to this module); per-request arrays by id."""

    req: Requests
    arrival: np.ndarray
    prompt: np.ndarray  # tokens to prefill (grows when a preempted request is recomputed)
    done: np.ndarray  # prompt tokens prefilled
    generated: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    last: np.ndarray
    reserved: np.ndarray  # KV tokens reserved ("full") or held ("grow")
    g0: np.ndarray  # tokens generated when its prompt (last) completed: later ones are in the KV cache
    running: np.ndarray  # ids, in admission order
    waiting: deque = field(default_factory=deque)
    next_arrival: int = 0
    gaps: list = field(default_factory=list)
    weights: list = field(default_factory=list)
    t: float = 0.0
    steps: int = 0
    decoded: float = 0.0  # sum of decode batch sizes over decode steps
    decode_steps: int = 0
    prefilled: int = 0
    # SGLang's new_token_ratio (reserve admission only): set to ratio_base, then decayed ratio_decays times
    ratio_base: float = 0.0
    ratio_decays: int = 0
    adp: AdpCounters = field(default_factory=AdpCounters)  # TensorRT-LLM's attention-DP balancer (serving_adp.py)
    adp_held: bool = False  # this step's context requests are held by it
    since_poll: int = 0  # decode steps since the scheduler last took new requests in (Schedule.recv_interval)
    lag_s: float = 0.0  # under admit_lag, the last step's wall time: requests that came during it are not fetched yet
    # requests whose last token the step just run computed, not yet seen as finished by an engine that processes
    # a step's outputs during the next step (late_finish): they keep their slot and KV through one more scheduling
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def simulate(req: Requests, sched: Schedule, step: StepModel, *, fast_forward: bool = True) -> Trace:
    """Play the engine's loop until every request finished; ``fast_forward=False`` takes decode
    steps one at a time (the reference the stretches must equal)."""
    st = _initial(req)
    st.ratio_base = sched.reserve.init_ratio if sched.reserve else 0.0  # the server idled before the run
    while st.next_arrival < len(st.arrival) or st.waiting or len(st.running):
        _admit_arrivals(st, sched)
        if not len(st.running) and not st.waiting:
            _release_late(st)  # an idle engine drains its pending outputs (llm_engine.py step 0.6.0)
            st.t, st.lag_s = max(st.t, float(st.arrival[st.next_arrival])), 0.0  # an idle executor fetches on arrival
            if sched.reserve:  # an idle SGLang resets its estimate (tp_worker.py forward_step)
                st.ratio_base, st.ratio_decays = sched.reserve.init_ratio, 0
            continue
        chunks, decodes = _plan_step(st, sched)
        if not chunks and not len(decodes) and len(st.late):
            _late_call(st, sched, step)
            continue
        require(bool(chunks) or len(decodes) > 0, "serving",
                "the engine can run no request: its KV cache or token budget holds none of them")
        if chunks:
            at_end = _single_step(st, sched, step, chunks, decodes)
        else:
            at_end = _decode_stretch(st, sched, step, decodes, fast_forward)
        _retire(st, sched, at_end)
    gaps = np.concatenate(st.gaps) if st.gaps else np.zeros(0)
    weights = np.concatenate(st.weights) if st.weights else np.zeros(0)
    return Trace(arrival_s=st.arrival, first_token_s=st.first, finish_s=st.finish, output_len=req.output_len,
                 input_len=req.input_len, itl_s=gaps, itl_weight=weights, steps=st.steps,
                 mean_running=st.decoded / st.decode_steps if st.decode_steps else 0.0, prefilled_tokens=st.prefilled)


def _initial(req: Requests) -> _State:
    n = len(req.arrival_s)
    arrival = req.arrival_s.astype(float).copy()
    if req.concurrency:
        arrival[:] = np.inf
        arrival[:req.concurrency] = 0.0
    return _State(req=req, arrival=arrival, prompt=req.input_len.astype(np.int64).copy(), done=np.zeros(n, np.int64),
                  generated=np.zeros(n, np.int64), first=np.full(n, np.nan), finish=np.full(n, np.nan),
                  last=np.zeros(n), reserved=np.zeros(n, np.int64), g0=np.ones(n, np.int64),
                  running=np.zeros(0, np.int64))


def _admit_arrivals(st: _State, sched: Schedule) -> None:
    """Arrived requests join the queue when the scheduler polls for them: every loop, or under SGLang's
    --scheduler-recv-interval N (SchedulerRecvSkipper, scheduler_recv_skipper.py, 0.5.12 wheel: a decode
    step adds 1 to a counter, any other step 1000, an idle loop 1; it polls and resets at N) once N
    decode steps have run since the last poll, at once after a prompt step, and while idle. Under DP
    attention 0.5.23 counts the ranks' common mode (scheduler_components/recv_skipper.py; 0.5.12 refused it)."""
    if sched.recv_interval > 1:
        idle = not len(st.running) and not st.waiting
        if not idle and st.since_poll < sched.recv_interval:
            return
        st.since_poll = 0
    while st.next_arrival < len(st.arrival) and st.arrival[st.next_arrival] <= st.t - st.lag_s:
        st.waiting.append(st.next_arrival)
        st.next_arrival += 1


def _plan_step(st: _State, sched: Schedule) -> tuple[list, np.ndarray]:
    """(prompt chunks as (request, tokens), decoding requests) of the next step."""
    prefilled = st.done[st.running] >= st.prompt[st.running]
    decoding = st.running[prefilled]
    prefilling = st.running[~prefilled] if len(decoding) < len(st.running) else decoding[:0]
    if sched.adp_balance:
        contexts = len(prefilling) + min(len(st.waiting), max(0, sched.max_num_seqs - len(st.running)))
        held = hold_context(sched.adp_balance, st.adp, contexts=contexts, decodes=len(decoding),
                            max_seqs=sched.max_num_seqs)
        st.adp_held = held and contexts > 0
        if st.adp_held:
            return [], decoding
    if sched.scheduler == "mixed":
        waiting = (int(st.prompt[i] - st.done[i]) for i in st.waiting)  # whole prompts fill each DP rank's own budget
        return _fill_prompts(st, sched, mixed_budget(sched, len(decoding), waiting), prefilling), decoding
    chunks = _fill_prompts(st, sched, sched.prompt_step_tokens, prefilling)
    return (chunks, decoding[:0]) if chunks else ([], decoding)


def _fill_prompts(st: _State, sched: Schedule, budget: int, prefilling: np.ndarray) -> list:
    """Prompt chunks within ``budget``: partly prefilled requests (``prefilling``, the running ones
    whose prompt is not done) first, then waiting ones (FCFS) while the sequence cap and the KV
    cache admit them."""
    if budget <= 0 or (not len(prefilling) and not st.waiting):
        return []
    chunks = []
    cap = sched.prefill_chunk_tokens or sched.max_num_batched_tokens
    # KV tokens left to admit against: blocks not yet taken, or (reserve rule) the estimated room
    room = (reserve_room(st, sched.reserve, sched.kv_capacity_tokens) if sched.reserve
            else sched.kv_capacity_tokens - int(st.reserved[st.running].sum()) - int(st.reserved[st.late].sum()))
    for i in prefilling:
        take = min(int(st.prompt[i] - st.done[i]), budget, cap)
        if take <= 0:
            return chunks
        chunks.append((int(i), take))
        budget -= take
        if sched.reserve:  # a continuing chunk reserves its output once it completes the prompt
            room -= take + (output_need(st, sched.reserve, int(i)) if st.done[i] + take >= st.prompt[i] else 0)
    admitted = []
    while st.waiting and budget > 0 and len(st.running) + len(st.late) + len(admitted) < sched.max_num_seqs:
        i = st.waiting[0]
        left = int(st.prompt[i] - st.done[i])
        take = min(left, budget, cap) if sched.chunked_prefill else left
        fits, cost = _admission(st, sched, i, take, room)
        if not fits or take > budget:
            break
        st.waiting.popleft()
        admitted.append(i)
        st.reserved[i] = cost if not sched.reserve else whole_blocks(st.prompt[i], sched.kv_block_tokens)
        room -= cost
        chunks.append((i, take))
        budget -= take
    if admitted:
        st.running = np.concatenate([st.running, np.asarray(admitted, dtype=np.int64)])
    return chunks


def _admission(st: _State, sched: Schedule, i: int, take: int, room: float) -> tuple[bool, int]:
    """Whether request ``i`` (prefilling ``take`` tokens now) fits the room, and the KV tokens its
    admission takes from it: its prompt's blocks (plus its whole output under "full"); or (reserve
    rule) its whole prompt plus output must fit, strictly (add_one_req refuses total_tokens >=
    rem_total_tokens), and it takes that, or only the chunk where the prompt is split
    (PrefillAdder._prefill_one_req: a truncated chunk reserves no output yet)."""
    if sched.reserve:
        left = int(st.prompt[i] - st.done[i])
        whole = left + output_need(st, sched.reserve, i)
        return whole < room, (whole if take == left else take)
    extra = st.req.output_len[i] if sched.kv_reservation == "full" else 0
    need = int(whole_blocks(st.prompt[i] + extra, sched.kv_block_tokens))
    return need <= room, need


def _single_step(st: _State, sched: Schedule, step: StepModel, chunks: list, decodes: np.ndarray) -> np.ndarray:
    """One step of prompt chunks (and, in a mixed engine, the running decodes); the requests it finished."""
    if len(decodes):
        decodes = make_room(st, sched, decodes)
    ids, takes = np.asarray(chunks, dtype=np.int64).T
    done = st.done[ids]
    completes = done + takes >= st.prompt[ids]
    sampled = len(decodes) + int(np.count_nonzero(completes))
    tokens = int(takes.sum())
    pairs = step.window.pairs(done, takes)  # causal pairs, fewer on windowed layers (serving_window.py)
    # DP attention: a prompt runs whole on one rank; the largest go first to the least loaded ranks
    # (TensorRT-LLM _fetch_new_requests sorts new requests by length onto a heap of ranks' context tokens)
    busiest = np.argsort(-takes, kind="stable")[::step.dp_ranks]
    gpu = step.gpu_s(decodes=len(decodes), context=step.window.positions(kv_tokens(st, decodes)) if len(decodes) else 0.0,
                     prefill_tokens=tokens, pairs=float(pairs.sum()), sampled=sampled,
                     rank_prefill=(int(takes[busiest].sum()), float(pairs[busiest].sum())), prefix_tokens=float(done.sum()))
    # prompt steps run eagerly (graphs are captured for decodes)
    seqs = _host_seqs(len(chunks) + len(decodes), step)
    streams = frontend_streams(sched, sampled, step.dp_ranks)  # the requests that get a token this step
    wall = step_wall_s(sched, gpu, 1, eager=True, seqs=seqs, streams=streams)
    st.t, st.lag_s = st.t + wall, wall * sched.admit_lag
    delivered = delivered_at(sched, st.t, seqs, streams)
    st.done[ids] = done + takes
    st.prefilled += tokens
    completed = ids[completes]
    new = completed[st.generated[completed] == 0]
    st.generated[new], st.first[new], st.last[new] = 1, delivered, delivered
    st.g0[completed] = st.generated[completed]
    if len(decodes):
        _stamp_decodes(st, decodes, np.asarray([delivered]), 1)
    st.steps += 1
    st.since_poll = sched.recv_interval  # a prompt step weighs 1000: the next loop polls
    ran = np.concatenate([ids, decodes])
    return ran[st.generated[ran] >= st.req.output_len[ran]]  # this step's finishers


def _host_seqs(seqs: int, step: StepModel) -> int:
    """Sequences one host process schedules: under DP attention each rank runs its own scheduler
    process on its share (SGLang's per-rank schedulers, vLLM's per-rank engine cores)."""
    return -(-seqs // step.dp_ranks)


def _stretch_length(st: _State, sched: Schedule, decodes: np.ndarray, durations_of) -> int:
    """Decode steps until the next event: a request finishes, a request arrives (it may join the
    next step), or (under "grow") the KV cache may run out."""
    k = int((st.req.output_len[decodes] - st.generated[decodes]).min())
    if sched.kv_reservation == "grow":
        k = steps_in_kv(st, sched, decodes, k)
    if st.next_arrival < len(st.arrival) and np.isfinite(st.arrival[st.next_arrival]):
        ends = st.t + np.cumsum(durations_of(k))
        k = min(k, sched.next_poll(st.since_poll, int(np.searchsorted(ends, st.arrival[st.next_arrival])) + 1))
    return max(1, k)


def _decode_stretch(st: _State, sched: Schedule, step: StepModel, decodes: np.ndarray, fast_forward: bool) -> np.ndarray:
    """Decode steps of one batch up to the next event, in one move: step j's context is the
    first step's plus j x batch (on windowed layers only the requests inside their window grow it:
    serving_window.py), so its GPU time is the first step's plus j x that growth x (per position).
    Returns the requests whose last token came at its last step."""
    before = len(st.waiting)
    decodes = make_room(st, sched, decodes)
    retracted = len(st.waiting) > before
    fast_forward = fast_forward and not retracted  # a preempted request may come back next step
    b, calls = len(decodes), sched.scheduler_steps
    held = kv_tokens(st, decodes)
    eager = b > sched.decode_graph_max_batch
    # a graph replays its captured batch: the padding's dummy requests run every operator (graph_padding.py)
    rows = b if eager else min(padded_batch(b, sched.decode_graph_sizes, step.dp_ranks), step.max_tokens)
    first = step.gpu_s(decodes=rows, context=step.window.positions(held), prefill_tokens=0, pairs=0.0, sampled=rows)
    slope = step.num_layers * step.decode_s_per_position * step.window.growing(held)

    made = [np.zeros(0)]  # the longest durations made so far: a shorter stretch's are its prefix

    def durations_of(k: int) -> np.ndarray:
        if k > len(made[0]):
            j = np.arange(k, dtype=float)
            made[0] = step_wall_s(sched, first + slope * j, (j % calls == 0).astype(float), eager,
                                  seqs=_host_seqs(b, step), streams=frontend_streams(sched, b, step.dp_ranks))
        return made[0][:k]

    k = _stretch_length(st, sched, decodes, durations_of) if fast_forward and not st.adp_held else 1
    if sched.adp_balance and not st.adp_held:  # the steps after the first count as waiting ones too
        idle_iterations(sched.adp_balance, st.adp, iterations=k - 1, decodes=b)
    if sched.reserve and st.waiting and len(st.running) < sched.max_num_seqs and k > 1:
        # SGLang tries to admit before every decode step: stop where the first waiting request fits
        k = steps_until_admitted(st, sched.reserve, sched.kv_capacity_tokens, decodes, k)
    k = _whole_calls(st, sched, decodes, k)
    durations = durations_of(k)
    ends = st.t + np.cumsum(durations)
    generated = st.generated[decodes].copy()
    _stamp_decodes(st, decodes, delivered_at(sched, ends, _host_seqs(b, step), frontend_streams(sched, b, step.dp_ranks)),
                   calls)
    _count_stretch(st, sched, decodes, float(ends[-1]), k, retracted, float(durations[-1]))
    return decodes[(st.generated[decodes] - generated == k) & (st.generated[decodes] >= st.req.output_len[decodes])]


def _count_stretch(st: _State, sched: Schedule, decodes: np.ndarray, end_s: float, k: int, retracted: bool, last_s: float) -> None:
    """The state after a stretch of ``k`` decode steps of ``decodes`` that ends at ``end_s``, its last ``last_s`` long."""
    if sched.kv_reservation == "grow":  # the blocks the last step's tokens took, as step by step
        st.reserved[decodes] = held_tokens(sched, kv_tokens(st, decodes) - 1)
    st.t, st.lag_s = end_s, last_s * sched.admit_lag
    if sched.reserve:  # each decode step without a retraction decays the ratio (forward_decode_batch)
        st.ratio_decays += k - int(retracted)
    st.steps, st.decoded, st.decode_steps = st.steps + k, st.decoded + len(decodes) * k, st.decode_steps + k
    st.since_poll = sched.since_poll_after(st.since_poll + k)


def _whole_calls(st: _State, sched: Schedule, decodes: np.ndarray, k: int) -> int:
    """The stretch's ``k`` decode steps as the engine's scheduler calls run them: one call where finished
    requests hold slots that waiting ones want (late_finish); whole multi-step calls (requests finishing
    early are dropped at a call's end), cut where the batch is done only when nothing waits (an engine left
    with nothing to run stops, its loop waiting for requests; with requests waiting it runs the call out:
    llm_engine.py step 0.6.0 schedules nothing while steps remain)."""
    calls = sched.scheduler_steps
    if len(st.late) and st.waiting:
        k = 1
    if calls > 1:
        k = calls * max(1, -(-k // calls)) if k >= calls else calls
        if not st.waiting:
            k = min(k, int((st.req.output_len[decodes] - st.generated[decodes]).max()))
    return k


def _stamp_decodes(st: _State, decodes: np.ndarray, ends: np.ndarray, calls: int) -> None:
    """Each decoding request gets a token at each end (up to its output length); tokens stream to
    the client at the end of each scheduler call of ``calls`` steps."""
    k = len(ends)
    generated = st.generated[decodes]
    got = np.minimum(st.req.output_len[decodes] - generated, k)
    if calls > 1:
        stream_at = np.arange(calls - 1, k, calls)
        if not len(stream_at) or stream_at[-1] != k - 1:
            stream_at = np.append(stream_at, k - 1)
        deliveries = ends[stream_at]
    else:
        stream_at, deliveries = None, ends  # a token streams at every step's end
    full = got == k
    everyone = bool(full.all())
    whole = decodes if everyone else decodes[full]
    if len(whole):  # requests decoding the whole stretch: first gap their own, the rest shared
        st.gaps.append(deliveries[0] - st.last[whole])
        st.weights.append(np.ones(len(whole)))
        if len(deliveries) > 1:
            st.gaps.append(np.diff(deliveries))
            st.weights.append(np.full(len(deliveries) - 1, float(len(whole))))
    st.generated[decodes] = generated + got
    if everyone:
        st.last[decodes] = deliveries[-1]
        return
    for i, n in zip(decodes[~full], got[~full]):  # requests finishing inside the stretch
        last_end = ends[n - 1] if calls == 1 else deliveries[min(np.searchsorted(stream_at, n - 1), len(deliveries) - 1)]
        mine = np.concatenate([[st.last[i]], deliveries[deliveries < last_end], [last_end]])
        st.gaps.append(np.diff(mine))
        st.weights.append(np.ones(len(mine) - 1))
        st.last[i] = last_end
        st.finish[i] = last_end
    st.last[whole] = deliveries[-1]


def _late_call(st: _State, sched: Schedule, step: StepModel) -> None:
    """The call an engine under ``late_finish`` makes of requests it has not yet seen finish when it can
    schedule nothing else (scheduler.py 0.6.0: 'an extra decode run is done to process the final tokens'):
    a decode call of them whose tokens nobody receives; its step processes their outputs and frees them."""
    b, calls = len(st.late), sched.scheduler_steps
    gpu = step.gpu_s(decodes=b, context=step.window.positions(kv_tokens(st, st.late)), prefill_tokens=0, pairs=0.0, sampled=b)
    j = np.arange(calls)
    st.t += float(np.sum(step_wall_s(sched, np.full(calls, gpu), (j == 0).astype(float), b > sched.decode_graph_max_batch,
                                     seqs=_host_seqs(b, step))))
    st.steps += calls
    _release_late(st)


def _release_late(st: _State) -> None:
    st.reserved[st.late] = 0
    st.late = st.late[:0]


def _retire(st: _State, sched: Schedule, at_end: np.ndarray) -> None:
    """Requests with all their tokens leave and free their KV; a closed loop sends the next one. Under
    ``late_finish`` those whose last token came at the step just run (``at_end``) hold their slot and KV
    through the next scheduling, and are freed after the step it makes."""
    _release_late(st)  # the step just run processed the outputs that finished them
    gone = st.generated[st.running] >= st.req.output_len[st.running]
    if not gone.any():
        return
    ids = st.running[gone]
    st.running = st.running[~gone]
    unstamped = ids[np.isnan(st.finish[ids])]
    st.finish[unstamped] = st.last[unstamped]  # their last token's delivery
    st.late = ids[np.isin(ids, at_end)] if sched.late_finish else ids[:0]
    st.reserved[ids[~np.isin(ids, st.late)]] = 0
    if st.req.concurrency:
        for finished_at in np.sort(st.finish[ids]):
            pending = np.flatnonzero(np.isinf(st.arrival))
            if len(pending):
                st.arrival[pending[0]] = max(float(finished_at), st.t)
