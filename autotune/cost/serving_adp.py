"""TensorRT-LLM's attention-DP balancer: context requests held until every rank can take one.

Under ``attention_dp_config.enable_balance`` the PyTorch executor (NVIDIA/TensorRT-LLM
tensorrt_llm/_torch/pyexecutor/py_executor.py ``PyExecutor._balance_adp_requests``, stored at
@9521caf4; the MLPerf v5.1 harness's pin 18c0333e is not in the index) all-gathers every rank's
scheduled context and generation counts each iteration and drops all context requests from the
step unless every rank has one and room for it. Once they do, and every rank also decodes, it drops
them for ``batching_wait_iters`` more iterations so more arrive to batch; where a rank lacks one it
waits up to ``timeout_iters`` iterations, and never while some rank has nothing to decode.

The simulator runs the replica's ranks as one queue (cost/serving_sim.py), so a rank "has" a context
request when the queue holds at least one per rank (the executor hands new requests to the least
loaded ranks) and its decodes are the replica's spread evenly over the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import require

__all__ = ["AdpBalance", "AdpCounters", "hold_context", "idle_iterations"]


@dataclass(frozen=True, kw_only=True)
class AdpBalance:
    """The balancer's settings (llmapi AttentionDpConfig) on a replica of ``ranks`` attention-DP ranks."""

    ranks: int
    batching_wait_iters: int
    timeout_iters: int

    def __post_init__(self) -> None:
        require(self.ranks >= 1, "attention_dp ranks", f"must be >= 1, got {self.ranks}")
        for name in ("batching_wait_iters", "timeout_iters"):  # AttentionDpConfig's validator: >= 0
            require(getattr(self, name) >= 0, f"adp_{name}", f"must be >= 0, got {getattr(self, name)}")


@dataclass(kw_only=True)
class AdpCounters:
    """The executor's adp_ctx_waiting_iters_count and adp_ctx_batching_wait_iters_count."""

    waiting: int = 0
    batching: int = 0


def hold_context(bal: AdpBalance, c: AdpCounters, *, contexts: int, decodes: int, max_seqs: int) -> bool:
    """One iteration of the rule: whether this step's ``contexts`` context requests are held back,
    beside ``decodes`` decoding requests under a replica cap of ``max_seqs`` running requests."""
    every_gen = decodes >= bal.ranks
    free = -(-decodes // bal.ranks) < max_seqs // bal.ranks  # the busiest rank below its max_batch_size
    if free and contexts >= bal.ranks:
        c.waiting = 0
        if not every_gen:
            return False
        if c.batching < bal.batching_wait_iters:
            c.batching += 1
            return True
        c.batching = 0
        return False
    c.waiting += 1
    if c.waiting >= bal.timeout_iters or not every_gen:
        c.waiting = 0
        return False
    return True


def idle_iterations(bal: AdpBalance, c: AdpCounters, *, iterations: int, decodes: int) -> None:
    """``iterations`` steps with no context request anywhere: each counts as waiting (its else branch)."""
    if decodes < bal.ranks or bal.timeout_iters <= 1:
        c.waiting = 0
    else:
        c.waiting = (c.waiting + iterations) % bal.timeout_iters
