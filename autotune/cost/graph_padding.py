"""A decode step padded up to the batch size of a captured CUDA graph (TensorRT-LLM's PyTorch backend).

With ``cuda_graph_config: enable_padding: true`` (what trtllm-bench sets, bench/benchmark/utils/general.py
get_settings, and what the performance overviews' llm_options.yml state) a generation-only batch is padded
with dummy generation requests up to the smallest captured batch size that holds it, and the graph of that
size replays: every operator runs the padded rows (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor
cuda_graph_runner.py _get_padded_batch / _round_up_batch_size @7b437aaa). The captured sizes are the
configured ones up to the executor's largest decode batch, min(max_batch_size, max_num_tokens), plus that
largest batch itself when a configured size lies above it (model_engine.py _filter_cuda_graph_batch_sizes
@001e6700). Under attention DP every rank pads to the same size, the largest rank's rounded up (an even
split of the decodes here). The overviews' list (1, 2, 4, ..., 256, 384, 512, 1024, 2048, 4096, 8192)
leaves gaps of up to 2x above 512: a decode batch of 1,100 a rank runs as 2,048.
"""

from __future__ import annotations

import bisect

__all__ = ["graph_sizes", "padded_batch", "replica_graph_max"]


def graph_sizes(configured: tuple[int, ...], largest_batch: int) -> tuple[int, ...]:
    """The batch sizes a rank captures: the configured ones up to ``largest_batch`` (its executor's largest
    decode batch), then ``largest_batch`` where a configured size lies above it; () without a list."""
    if not configured or largest_batch < 1:
        return ()
    kept = tuple(b for b in configured if b <= largest_batch)
    return kept if kept and kept[-1] == largest_batch or len(kept) == len(configured) else kept + (largest_batch,)


def padded_batch(decodes: int, sizes: tuple[int, ...], ranks: int = 1) -> int:
    """The decode rows a step of ``decodes`` requests runs over ``ranks`` attention-DP ranks: each rank's
    share (an even split, rounded up) padded to the next of ``sizes``; unpadded beyond the largest."""
    if not sizes or decodes < 1:
        return decodes
    share = -(-decodes // ranks)
    i = bisect.bisect_left(sizes, share)
    return decodes if i == len(sizes) else max(decodes, sizes[i] * ranks)


def replica_graph_max(engine, memory_bytes: float, dp_ranks: int, tp: int = 1) -> int:
    """The largest replica decode batch that replays a CUDA graph (serving_run.Schedule.decode_graph_max_batch): the
    engine's limit, or, where it holds each attention-DP rank's batch (ServingEngine.decode_graph_per_dp_rank:
    SGLang compares the busiest rank's decodes with its per-rank capture list, TensorRT-LLM's PyTorch executor each
    rank's padded batch with its own sizes), ``dp_ranks`` x it, the simulator spreading the decodes evenly
    (ceil(b / ranks) <= limit exactly when b <= ranks x limit); ``tp``: the replica's TP degree (SGLang 0.5.3 on)."""
    limit = engine.graph_max_on(memory_bytes, tp)
    return limit * dp_ranks if engine.decode_graph_per_dp_rank else limit
