"""SGLang 0.5.3 and later's memory left outside weights and KV cache when the launch sets no
--mem-fraction-static (memory rule "sglang_reserve", runtimes/sglang-0.5.3.toml; sglang.toml for 0.5.6 on, the
0.5.6 and 0.5.12 wheels' function keeping the same terms).

server_args.py ServerArgs._handle_gpu_memory_settings (the sglang 0.5.3, 0.5.4 and 0.5.5.post1 wheels,
PyPI) first picks chunked_prefill_size and cuda_graph_max_bs by the GPU memory nvidia-smi reports
(get_nvgpu_memory_capacity, MiB) and the TP degree, then reserves, in MiB,

    512 + 1.5 x max(chunk, 2048) + 2 x cuda_graph_max_bs + 1024 x tp x pp / 8
        (+ 3 x cuda_graph_max_bs x dp, + 1.5 x that again above 300, under DP attention)

at least 10 GiB on GPUs above 60 GiB, and sets mem_fraction_static = (memory - reserve) / memory,
rounded to 3 places; model_runner.py profile_max_num_token then gives the KV pool what that share
leaves after the weights. 0.4.8-0.5.2 reserve a per-tier table instead (9.5 + TP/2 GiB on H100), which
sglang-0.4.8.toml does not hold. Not held here: pp (the rows serve pp 1), speculative decoding's extra
2-6 GiB, and piecewise CUDA graphs (off by default to 0.5.6; on in 0.5.12: 8 MiB a captured size, 1.5 GiB
with MLA). The presets' decode_graph_max_by_memory holds the graph tiers; sglang_graph_max is 0.5.3's.
"""

from __future__ import annotations

__all__ = ["engine_reserved_bytes", "sglang_graph_max", "sglang_reserved_bytes"]

_MIB = 2.0**20


def sglang_graph_max(memory_bytes: float, tp: int) -> int:
    """cuda_graph_max_bs when the launch sets none (server_args.py _handle_gpu_memory_settings, 0.5.3-0.5.5)."""
    mib = memory_bytes / _MIB
    if mib < 20 * 1024:
        return 8
    if mib < 60 * 1024:  # 20-35 GiB: 16 (0.5.5: 24) below TP 4, else 80; 35-60 GiB: 32, else 160
        return (80 if tp >= 4 else 16) if mib < 35 * 1024 else (160 if tp >= 4 else 32)
    if mib < 160 * 1024:  # H100, A100 80GB, H20, H200
        return 512 if tp >= 4 else 256
    return 512  # B200, B300, MI300


def sglang_reserved_bytes(*, memory_bytes: float, chunk_tokens: int, tp: int, attention_dp: bool = False,
                          graph_max: int | None = None) -> float:
    """Bytes a GPU keeps outside weights and KV cache (server_args.py _handle_gpu_memory_settings, 0.5.3-0.5.5);
    ``graph_max``: a launch's --cuda-graph-max-bs, which the reserve takes in place of the tier's."""
    graphs = graph_max or sglang_graph_max(memory_bytes, tp)
    # 512 MiB of metadata, 1.5 MiB a prompt-chunk token, 2 MiB a captured batch, 1 GiB per 8 GPUs (SGLang's heuristic)
    reserve_mib = 512 + 1.5 * max(chunk_tokens, 2048) + 2 * graphs + tp / 8 * 1024
    if attention_dp:  # DP attention's padding, dp_size = tp (server_args.py, the same function)
        reserve_mib += 3 * graphs * tp + (1.5 * graphs * tp if graphs > 300 else 0.0)
    if memory_bytes / _MIB > 60 * 1024:
        reserve_mib = max(reserve_mib, 10 * 1024)
    # mem_fraction_static is rounded to 3 places; the pool is that share of the memory
    fraction = round((memory_bytes / _MIB - reserve_mib) / (memory_bytes / _MIB), 3)
    return (1.0 - fraction) * memory_bytes


def engine_reserved_bytes(engine, memory_bytes: float, tp: int, attention_dp: bool) -> float:
    """sglang_reserved_bytes for a ServingEngine: its prompt chunk and its decode-graph limit at ``tp``, the preset's
    tiers (decode_graph_max_by_memory) or the launch's (serving_flags.limit_flags clears the tiers for --cuda-graph-max-bs;
    _handle_gpu_memory_settings keeps a given cuda_graph_max_bs and reserves 2 MiB, 3-4.5 MiB x dp under DP attention,
    per batch)."""
    return sglang_reserved_bytes(memory_bytes=memory_bytes, chunk_tokens=engine.chunk_tokens_on(memory_bytes), tp=tp,
                                 attention_dp=attention_dp, graph_max=engine.graph_max_on(memory_bytes, tp))
