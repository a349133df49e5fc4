"""Per-layer attention coefficients of a serving step (cost/serving_step.py StepModel): decodes'
kernel latency, cost per cached position and per sequence, prompt chunks' latency and cost per causal
pair; generic (roofline of the device's fits) or the engine's measured decode op where it states one."""

from __future__ import annotations

from autotune.cost.serving_ops import ACT_BYTES
from autotune.graph.operators import decode_attention
from autotune.spec.model import ModelSpec

__all__ = ["attention_coefficients", "kv_split"]


def kv_split(model: ModelSpec, shape) -> int:
    """Ways the replica's KV cache is split over its GPUs: by heads under TP (not MLA's latent), at
    most one way per KV head: with more ranks than KV heads each rank keeps a whole head, replicated
    (trtllm-bench's tuning.py: "Each GPU in TP group has at least 1 kv head", max(tp_size,
    num_key_value_heads) @04cba882; vLLM's QKVParallelLinear: num_kv_heads = 1 and tp / total
    replicas when tp_size >= total_num_kv_heads); by requests under DP attention."""
    if shape.attention_dp:
        return shape.tp
    return min(model.kv_cache_shards(shape.tp), model.num_kv_heads) if not model.is_mla else model.kv_cache_shards(shape.tp)


def attention_coefficients(model: ModelSpec, device, shape, kv_bytes: float,
                            measured: tuple | None = None,
                            measured_mla: tuple | None = None,
                            prompt: tuple[float, ...] | None = None) -> dict[str, float]:
    """Per-layer attention coefficients: decodes read K/V at the memory fit (flash-decoding,
    graph.decode_attention), prompt chunks run the fused kernel's FLOP fit on causal pairs. The
    replica's work splits over its GPUs by heads (TP) or by requests (DP attention). ``measured``: the
    engine's decode-attention op as measured on this GPU (ServingEngine.decode_attention), which then
    prices grouped-query decodes (_measured_decode; its fit misses MHA shapes by -41..+64%, so they stay
    generic); ``measured_mla``: its MLA (decode, prompt) ops for the heads a GPU runs, either None
    (_measured_mla); ``prompt``: its prompt-attention op as measured on this GPU (latency, seconds per
    causal FLOP and, where the row has it, seconds per prompt token x query width; ServingEngine.prefill_attention),
    which prices non-MLA prompts in its place."""
    tp = shape.tp
    eff = device.kernel_efficiency
    memory = device.memory_regression("stream")
    attention = device.regression("attention", "bf16")
    one, two = decode_attention(model, 1.0, kv_bytes), decode_attention(model, 2.0, kv_bytes)
    per_request = decode_attention(model, 0.0, ACT_BYTES)
    shards = kv_split(model, shape)
    pair_flops = 2.0 * (model.q_width + model.attn_out_width) / tp
    # a cached position costs its read or its FLOPs, whichever is longer (roofline): GQA's few KV heads
    # make decode memory-bound, MLA's absorbed form (every head scores the shared latent) compute-bound
    # (FlashMLA README: 3000 GB/s memory-bound, 660 TFLOPS compute-bound on H800); the FLOPs split over
    # the GPUs by heads (TP) or by requests (DP attention), at the fused attention kernel's FLOP fit
    read_s = (two["in_bytes"] - one["in_bytes"]) / shards * memory.seconds_per_unit
    compute_s = (two["flops"] - one["flops"]) / tp * attention.seconds_per_unit
    prefill = _prefill(model, tp, attention, eff, pair_flops, prompt)
    # the measured op's fit holds for grouped-query layers (its rows); MHA runs other kernels (masked MHA)
    grouped = model.num_kv_heads < model.num_heads and not model.is_mla
    if measured is not None and grouped and not shape.attention_dp:
        return _measured_decode(model, shape, measured, read_s) | prefill
    decode = dict(decode_lat_s=memory.latency_s / eff,
                  decode_s_per_position=max(read_s, compute_s) / eff,
                  decode_s_per_request=(per_request["in_bytes"] + per_request["out_bytes"]) / tp * memory.seconds_per_unit / eff)
    if measured_mla is not None and model.is_mla:
        return _measured_mla(shape, measured_mla, decode, prefill)
    return decode | prefill


def _prefill(model: ModelSpec, tp: int, attention, eff: float, pair_flops: float,
             prompt: tuple[float, ...] | None) -> dict[str, float]:
    """Prompt attention's coefficients: the fused kernel's FLOP fit over ``eff``, or the engine's measured
    ``prompt`` op (latency, seconds per causal FLOP[, per prompt token x query width]) for non-MLA layers."""
    if prompt is None or model.is_mla:
        return dict(prefill_lat_s=attention.latency_s / eff, prefill_s_per_pair=pair_flops * attention.seconds_per_unit / eff)
    prefill = dict(prefill_lat_s=prompt[0], prefill_s_per_pair=pair_flops * prompt[1])  # measured, so no kernel_efficiency
    if len(prompt) > 2:  # a prompt token's own work (Q/K/V loads, RoPE, KV write) over the query heads it runs
        prefill["prefill_s_per_token"] = prompt[2] * model.q_width / tp
    return prefill


def _measured_decode(model: ModelSpec, shape, measured: tuple, read_s: float) -> dict[str, float]:
    """A grouped-query decode layer as the engine's measured op runs it: its kernels' latency, a cost
    per sequence and KV head a GPU holds, and the cached K/V bytes at the stream fit (measured, so no
    kernel_efficiency); a row's knee: the sequences x KV heads whose blocks run side by side on the SMs at the
    latency alone (0: the straight line). TensorRT-LLM's attention op (QKV preprocessing with RoPE and the
    KV append, then XQA / masked MHA), measured by NVIDIA's aiconfigurator on H100 and H200, fits this within
    15-21% rms on Llama's head shapes where the generic pricing runs 42-53% low on average
    (scripts/fit_trtllm_decode_attention.py, fit_trtllm_decode_attention_knee.py; the presets' sources)."""
    latency_s, per_kv_head_s, knee_items = (tuple(measured) + (0.0,))[:3]
    kv_heads_per_gpu = -(-model.num_kv_heads // kv_split(model, shape))
    # scripts/fit_trtllm_decode_attention_knee.py: blocks a sequence and KV head run side by side until the SMs fill
    return dict(decode_lat_s=latency_s, decode_s_per_position=read_s, decode_s_per_request=per_kv_head_s * kv_heads_per_gpu,
                decode_knee_requests=knee_items / kv_heads_per_gpu)


def _measured_mla(shape, measured: tuple, decode: dict, prefill: dict) -> dict[str, float]:
    """An MLA layer as the engine's measured ops run it on one GPU's heads (measured, so no
    kernel_efficiency), each op the generic ``decode`` / ``prefill`` coefficients where it has no row.
    Decode: its kernels' latency, a cost per sequence and per cached position (the latent's read or its
    heads' FLOPs, whichever binds); TensorRT-LLM's FlashMLA / TRTLLM-Gen op and SGLang's fa3 /
    trtllm_mla backends, measured by NVIDIA's aiconfigurator on H100, H200, B200, GB200, B300 and GB300,
    fit this within 12-17% rms per KV dtype and head count. Prompt: its latency, a cost per prompt token
    and per causal pair (TensorRT-LLM's context FMHA on the expanded heads: 14-30% rms). Under TP every
    GPU runs its heads over all the step's sequences; under DP attention each rank runs all heads over
    its 1/tp of them, so the per-unit costs are a rank's over tp (gpu_s counts the replica's units).
    (scripts/fit_mla_decode_attention.py; the presets' mla_decode_attention / mla_prefill_attention sources)"""
    ranks = shape.tp if shape.attention_dp else 1
    mla_decode, mla_prefill = measured
    if mla_decode is not None:
        latency_s, per_sequence_s, per_position_s = mla_decode
        decode = dict(decode_lat_s=latency_s, decode_s_per_position=per_position_s / ranks,
                      decode_s_per_request=per_sequence_s / ranks)
    if mla_prefill is not None:
        latency_s, per_token_s, per_pair_s = mla_prefill
        prefill = dict(prefill_lat_s=latency_s, prefill_s_per_pair=per_pair_s / ranks, prefill_s_per_token=per_token_s / ranks)
    return decode | prefill
