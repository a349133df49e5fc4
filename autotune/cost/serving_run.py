"""What one simulated serving run takes and gives: its requests, the scheduler's rules and limits,
and the stamps of every request (autotune/cost/serving_sim.py plays the run)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.cost.serving_adp import AdpBalance
from autotune.cost.serving_admission import OutputReserve
from autotune.cost.serving_host import HOST_OVERLAPS
from autotune.errors import require

__all__ = ["Requests", "Schedule", "Trace"]


@dataclass(frozen=True, kw_only=True, eq=False)
class Requests:
    """The requests of a run, in arrival order. ``concurrency`` > 0: a closed loop that keeps that
    many in flight (a request arrives when one finishes; ``arrival_s`` is then ignored)."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    concurrency: int = 0

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        require(n >= 1 and len(self.input_len) == n and len(self.output_len) == n, "requests",
                "arrival times, input and output lengths must be non-empty and of one length")
        require(bool(np.all(np.diff(self.arrival_s) >= 0)), "requests", "arrival times must be sorted")
        require(bool(np.all(self.input_len >= 1) and np.all(self.output_len >= 1)), "requests",
                "every request needs at least one input and one output token")


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """The scheduler's rules and limits (a ServingEngine's, with its EngineLimits)."""

    scheduler: str  # "prefill_first" or "mixed"
    chunked_prefill: bool
    prefill_chunk_tokens: int  # 0: the token budget
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    kv_block_tokens: int
    kv_reservation: str  # "grow" or "full"
    scheduler_steps: int = 1
    recv_interval: int = 1  # new requests are taken in every this many decode steps (SGLang's recv skipper)
    admit_lag: bool = False  # requests are fetched a step ahead (TensorRT-LLM's overlap scheduler; serving_sim._admit_arrivals)
    step_host_s: float = 0.0  # host seconds a scheduler call (serving_host.py)
    step_host_share: float = 0.0
    step_host_s_per_seq: float = 0.0  # a scheduler call's host seconds per sequence of its step
    output_host_s: float = 0.0  # host seconds processing a step's output
    output_host_s_per_seq: float = 0.0  # ... per sequence of the step
    host_overlap: str = "none"  # HOST_OVERLAPS: the host work that runs beside the GPU's
    frontend_s_per_seq: float = 0.0  # the frontend process's seconds per sequence of a step (serving_host.py)
    frontend_per_dp_rank: bool = False  # one frontend per DP rank, else one for the replica
    loop: object = None  # vLLM's API-server loop (serving_loop.LoopClock): stamps tokens as it emits them; None: none
    eager_issue_s: float = 0.0  # host seconds to issue an eager step's operators (Python engines), 0 if none
    decode_graph_max_batch: int = 0  # decode steps up to this batch replay a CUDA graph (no per-operator issue)
    decode_graph_sizes: tuple[int, ...] = ()  # the graphs' batch sizes, a decode step padded up to one (graph_padding.py)
    # SGLang's admission (serving_admission.py): a prompt waits until its output fits beside the
    # running requests' expected output; None: a prompt is admitted when its own KV blocks fit
    reserve: OutputReserve | None = None
    # TensorRT-LLM's attention-DP balancer (serving_adp.py); None: context requests are never held
    adp_balance: AdpBalance | None = None
    # sliding-window layers whose blocks behind the window are freed (vLLM's hybrid KV cache manager):
    # their share of the KV bytes per token and the window; 0: every layer holds every token
    kv_windowed_share: float = 0.0
    kv_window_tokens: int = 0
    # attention-DP ranks, each scheduling whole prompts within its own share of the token budget (serving_rank_budget.py)
    dp_ranks: int = 1

    @property
    def prompt_step_tokens(self) -> int:
        """Prompt tokens one step of a prompts-first engine takes at most: the token budget and, where prompts are
        chunked, the chunk, which SGLang's PrefillAdder spends over the whole batch, not per request (rem_chunk_tokens,
        set to --chunked-prefill-size, less each added request's extend tokens; no request is added once it is spent:
        policy_scheduler.py 0.3.0, schedule_policy.py 0.4.0, 0.5.6 and 0.5.12)."""
        if self.chunked_prefill and self.prefill_chunk_tokens:
            return min(self.max_num_batched_tokens, self.prefill_chunk_tokens)
        return self.max_num_batched_tokens

    def __post_init__(self) -> None:
        require(self.host_overlap in HOST_OVERLAPS, "host_overlap", f"must be one of {', '.join(HOST_OVERLAPS)}")
        require(isinstance(self.recv_interval, int) and self.recv_interval >= 1, "recv_interval",
                f"must be an integer >= 1, got {self.recv_interval!r}")
        require(0.0 <= self.kv_windowed_share < 1.0 and (self.kv_windowed_share == 0.0 or self.kv_window_tokens >= 1),
                "kv_windowed_share", "must be in [0, 1), with a window of >= 1 token where it is above 0")

    @property
    def late_finish(self) -> bool:
        """Whether the engine learns that a request finished only while running the step after its last token:
        vLLM 0.6's asynchronous output processor (host_overlap "output") processes step n's outputs inside step
        n + 1, which the scheduler made before (scheduler.py _schedule_running 0.6.0: 'With async postprocessor,
        an extra decode run is done to process the final tokens'); under multi-step only a call's last step's
        outputs wait so (multi_step_model_runner.py _final_process_outputs returns that step's outputs to
        llm_engine.py step, whose output queue the next step's callback drains)."""
        return self.host_overlap == "output"

    def since_poll_after(self, steps: int) -> int:
        """Decode steps since the last poll for new requests after ``steps`` since an earlier one: the
        engine polled (and reset its counter) every ``recv_interval`` of them; ``recv_interval`` when a
        poll is due now."""
        n = self.recv_interval
        return steps if steps < n else (steps % n or n)

    def next_poll(self, since_poll: int, steps: int) -> int:
        """The fewest decode steps, ``steps`` at least, after which the scheduler polls for new requests,
        ``since_poll`` decode steps having run since its last poll."""
        n = self.recv_interval
        if n == 1:
            return steps
        first = max(1, n - since_poll)
        return first if steps <= first else first + -(-(steps - first) // n) * n


@dataclass(frozen=True, kw_only=True, eq=False)
class Trace:
    """Stamps of every request (seconds from the start) and the gaps between streamed chunks
    (``itl_s`` with ``itl_weight``: how many requests saw each gap)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_len: np.ndarray
    input_len: np.ndarray
    itl_s: np.ndarray
    itl_weight: np.ndarray
    steps: int
    mean_running: float  # requests decoding, averaged over decode steps
    prefilled_tokens: int = 0  # prompt tokens run, recomputations of preempted requests included

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """(latency - TTFT) / (output tokens - 1) per request of more than one output token."""
        many = self.output_len > 1
        return (self.finish_s[many] - self.first_token_s[many]) / (self.output_len[many] - 1)

    @property
    def duration_s(self) -> float:
        return float(self.finish_s.max() - self.arrival_s.min())
