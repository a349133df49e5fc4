"""The host's issue time of an inference step in an eager runtime's generate loop.

transformers' ``generate`` runs eager PyTorch: the host issues each kernel of a step from Python,
then synchronises on the step's output (it reads whether every sequence has finished). A decode
step of a small batch runs its kernels in a few milliseconds, far less than the host needs to
issue them, so the host sets the time per output token: on a lent H200, 1-8B models took 16-83 ms
a decode step while their kernels ran 2-17 ms (tests/data/h200/infer-2026-11-27). The kernels a
step issues are counted from transformers' own code (profilers/decode_ops.py ->
autotune/data/decode_launches.json); each costs the host what cost/host.py prices a kernel-launching
operator. With the sync every step, the host cannot run ahead into the next step: the step takes
the longer of the host's issue time and the GPU's.
"""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np

from autotune.cost.host import op_host_s
from autotune.data import data_path
from autotune.graph.opstream import stream_for

__all__ = ["step_launches", "inference_host_s"]

SCHEMA = "autotune.decode_launches/1"


@lru_cache(maxsize=1)
def _launches() -> dict:
    data = json.loads(data_path("decode_launches.json").read_text())
    assert data["schema"] == SCHEMA, data["schema"]
    return data["streams"]


def step_launches(runtime, model, num_layers: object, with_head: bool) -> object:
    """Kernels the host issues for ``num_layers`` decoder layers of one step (plus the embedding,
    head and the generate loop's own with ``with_head``); 0 where the runtime's host runs ahead
    (CUDA graphs, C++ engines) or its generate loop was not counted for this architecture."""
    if runtime.host_dispatch != "eager":
        return 0.0
    counts = _launches().get(stream_for(model, runtime.op_stream))
    if counts is None:
        return 0.0
    return num_layers * counts["per_layer"] + (counts["per_step"] if with_head else 0)


def inference_host_s(ctx, stage, num_layers: object, gpu_s: object, with_head: bool) -> object:
    """Seconds one step of the stage waits for its host beyond its GPU time ``gpu_s``."""
    host_s = step_launches(ctx.runtime, ctx.tables.model, num_layers, with_head) * op_host_s(ctx.cluster)
    return np.maximum(0.0, host_s - gpu_s)
