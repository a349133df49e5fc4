"""A request's host path outside the engine: the benchmark client and the server's front end.

An online-serving benchmark starts its TTFT clock in the client, before the HTTP request is sent,
and stops it when the first streamed chunk is parsed. Behind an inference server such as Triton's
tensorrtllm_backend ensemble (all_models/inflight_batcher_llm @v0.14.0), the prompt is tokenized by a
Python ``preprocessing`` model before the engine sees it, and every generated token is detokenized by
a ``postprocessing`` model on its way back. So, per request,

    TTFT (client) = client and HTTP + prompt encode (queued) + the engine's TTFT + one token's decode

The preprocessing model runs one instance (the backend README's INSTANCE_COUNT=1), so prompts are
encoded one after another: a prompt waits for the ones before it. Every streamed token takes the same
decode on its way out, so the gaps between tokens, and with them ITL and TPOT, are the engine's
while postprocessing keeps up (its load, tokens/s x decode seconds, is far below 1 at these rates).

The costs are the engine preset's ``client_request_s``, ``prompt_encode_s`` (seconds to encode a
prompt of n tokens, measured at several n and interpolated) and ``stream_token_s``; all zero: the
engine's own clock (a harness calling the engine in-process, as trtllm-bench does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autotune.cost.serving_run import Requests, Trace
from autotune.errors import require
from autotune.spec.serving_engine import ServingEngine

__all__ = ["FrontEnd", "frontend_of", "engine_requests", "client_trace"]


@dataclass(frozen=True, kw_only=True)
class FrontEnd:
    """Host seconds outside the engine (see the module's doc)."""

    client_request_s: float
    prompt_encode_s: tuple[tuple[int, float], ...]  # (prompt tokens, seconds to encode it), increasing
    stream_token_s: float

    def __post_init__(self) -> None:
        require(self.client_request_s >= 0 and self.stream_token_s >= 0, "frontend", "host seconds must be >= 0")
        points = np.asarray(self.prompt_encode_s, dtype=float).reshape(-1, 2)
        require(bool(np.all(np.diff(points[:, 0]) > 0) and np.all(points[:, 1] >= 0)), "serving.prompt_encode_s",
                "must be (prompt tokens, seconds) pairs with increasing token counts and seconds >= 0")

    def encode_s(self, tokens: np.ndarray) -> np.ndarray:
        """Seconds to encode prompts of ``tokens`` tokens: linear between the measured points; past the
        last, at its seconds per token (tokenizers slow down per token on long prompts, never speed up)."""
        if not self.prompt_encode_s:
            return np.zeros(len(tokens))
        n, s = np.asarray(self.prompt_encode_s, dtype=float).T
        tokens = np.asarray(tokens, dtype=float)
        inside = np.interp(tokens, np.concatenate([[0.0], n]), np.concatenate([[0.0], s]))
        return np.where(tokens > n[-1], tokens * s[-1] / n[-1], inside)


def frontend_of(engine: ServingEngine) -> FrontEnd | None:
    """The engine preset's front end, None where it prices none."""
    if not (engine.client_request_s or engine.prompt_encode_s or engine.stream_token_s):
        return None
    return FrontEnd(client_request_s=engine.client_request_s, prompt_encode_s=engine.prompt_encode_s,
                    stream_token_s=engine.stream_token_s)


def engine_requests(req: Requests, fe: FrontEnd) -> Requests:
    """The requests as the engine receives them: each after the client's request and its prompt's
    encode, one prompt at a time (one preprocessing instance, first come first served). A closed
    loop's arrivals follow finishes inside the simulation; its requests pass unchanged."""
    if req.concurrency:
        return req
    encode = fe.encode_s(req.input_len)
    ready = req.arrival_s + fe.client_request_s
    done = np.empty(len(ready))
    free_at = -np.inf
    for i, at in enumerate(ready):  # a FIFO single server: start when the request is there and the instance free
        free_at = max(at, free_at) + encode[i]
        done[i] = free_at
    return replace(req, arrival_s=done)


def client_trace(trace: Trace, sent: Requests, fe: FrontEnd) -> Trace:
    """The engine's trace as the client sees it: arrivals at the client's send times (a closed loop's:
    the engine's arrival less the client's request and the encode), each token delivered a decode later."""
    if sent.concurrency:
        arrival = trace.arrival_s - fe.client_request_s - fe.encode_s(trace.input_len)
    else:
        arrival = sent.arrival_s.astype(float)
    return replace(trace, arrival_s=arrival, first_token_s=trace.first_token_s + fe.stream_token_s,
                   finish_s=trace.finish_s + fe.stream_token_s)
